//! Execution: a lookup scan's values evaluated and probed, once per (re)scan.

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use engine::lookup::{Index, Projection};
use pgrx::pg_sys;

use super::readers::{cached_position, freshness_target, refresh_open, wait_for, with_open, Freshness};
use super::LookupPlan;
use crate::datum::{PgKind, RowBuffer};
use crate::error::OrReport;
use crate::fdw::pushdown;

/// A lookup scan at execution: evaluates its values and probes the cache, once per (re)scan.
pub struct Probe {
    relid: pg_sys::Oid,
    plan: LookupPlan,
    /// The value expressions' states.
    values: Vec<*mut pg_sys::ExprState>,
    /// Per value: the PostgreSQL kind of its values.
    kinds: Vec<PgKind>,
    /// The index's columns, as cached.
    key_schema: SchemaRef,
    /// The cached columns the query reads: what each probe returns.
    pub projection: Projection,
    done: bool,
    /// Probes and rows found, for EXPLAIN ANALYZE.
    pub probes: u64,
    pub found: u64,
}

/// Starts a lookup scan of `plan` for `node`: catches this backend's cache of `relid` up (once
/// per statement) and prepares the values; `None` when there is no cache to read any more.
pub unsafe fn begin(node: *mut pg_sys::ForeignScanState, relid: pg_sys::Oid, plan: &LookupPlan, exprs: *mut pg_sys::List, used: Option<&[String]>) -> Option<Probe> {
    let mut schema = || {
        let table = crate::fdw::table::ForeignHudiTable::of_relation(relid);
        table.open_reader().schema().clone()
    };
    if !refresh_open(relid, true, &mut schema) {
        return None;
    }
    let position = cached_position(relid).unwrap_or_default();
    let target = match freshness_target(relid, &position) {
        Err(()) => return None,
        Ok(Freshness::Current) => None,
        // Only the session's own commit is missing, and the scan runs once (its keys are
        // constants or the statement's parameters, no outer row's): one read of the lake
        // answers, sooner than the worker's refresh would (which the commit asked for). A
        // join's probes wait instead: the lake would be read again for every outer row.
        Ok(Freshness::OwnCommit(_)) if (*(*node).ss.ps.plan).extParam.is_null() => return None,
        Ok(Freshness::OwnCommit(target) | Freshness::Latest(target)) => Some(target),
    };
    if let Some(target) = target {
        let owner = (*(*(*node).ss.ss_currentRelation).rd_rel).relowner;
        if !wait_for(relid, owner, &target, &mut schema) {
            return None;
        }
    }
    let (key_schema, projection) = with_open(relid, |cache| {
        let fields = plan.columns.iter().map(|c| cache.schema().field_with_name(c).cloned().ok()).collect::<Option<Vec<_>>>()?;
        let projection = cache.projection(used).ok()?;
        // A generation of other indexes than planned: the lake answers.
        let index_matches = match plan.index {
            Index::RecordKey => cache.record_key_fields() == Some(plan.columns.as_slice()),
            Index::Secondary(n) => cache.secondary_indexes().get(n) == Some(&plan.columns),
        };
        index_matches.then(|| (std::sync::Arc::new(Schema::new(fields)), projection))
    })??;
    let states = pg_sys::ExecInitExprList(exprs, node as *mut pg_sys::PlanState);
    let values: Vec<*mut pg_sys::ExprState> = pushdown::list_items(states);
    let kinds = pushdown::list_items::<pg_sys::Node>(exprs)
        .into_iter()
        .zip(&plan.arrays)
        .map(|(expr, &array)| {
            let mut oid = pg_sys::exprType(expr);
            if array {
                oid = pg_sys::get_element_type(oid);
            }
            PgKind::from_type_oid(oid)
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Probe { relid, plan: plan.clone(), values, kinds, key_schema, projection, done: false, probes: 0, found: 0 })
}

impl Probe {
    /// The rows of this (re)scan: all of them at the first call, then `None`.
    pub unsafe fn next(&mut self, node: *mut pg_sys::ForeignScanState) -> Option<Option<RecordBatch>> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        let context = (*node).ss.ps.ps_ExprContext;
        // Each column's values: one, or an array's elements (NULLs match nothing).
        let mut per_column: Vec<Vec<pg_sys::Datum>> = Vec::with_capacity(self.values.len());
        for (i, state) in self.values.iter().enumerate() {
            let mut is_null = false;
            let datum = pg_sys::ExecEvalExprSwitchContext(*state, context, &mut is_null);
            if is_null {
                return Some(None);
            }
            per_column.push(if self.plan.arrays[i] { pushdown::array_elements(datum).1 } else { vec![datum] });
        }
        if let Some(key) = self.single_integer_key(&per_column) {
            return self.probe_keys(&[key]);
        }
        // Every combination of the columns' values, converted to the cached types; a value
        // the column cannot hold (out of its range) matches nothing.
        let mut keys: Vec<RecordBatch> = Vec::new();
        let mut combination = vec![0usize; per_column.len()];
        if per_column.iter().all(|values| !values.is_empty()) {
            loop {
                let row: Vec<Option<(pg_sys::Datum, PgKind)>> =
                    combination.iter().enumerate().map(|(c, &i)| Some((per_column[c][i], self.kinds[c]))).collect();
                let mut buffer = RowBuffer::new(self.key_schema.clone());
                if buffer.push(&row).is_ok() {
                    keys.push(buffer.take());
                }
                // The next combination, odometer-wise.
                let mut c = 0;
                while c < combination.len() {
                    combination[c] += 1;
                    if combination[c] < per_column[c].len() {
                        break;
                    }
                    combination[c] = 0;
                    c += 1;
                }
                if c == combination.len() {
                    break;
                }
            }
        }
        if keys.is_empty() {
            return Some(None);
        }
        let columns: Vec<ArrayRef> = if let [one] = keys.as_slice() {
            one.columns().to_vec()
        } else {
            (0..self.key_schema.fields().len())
            .map(|c| {
                let parts: Vec<&dyn Array> = keys.iter().map(|k| k.column(c).as_ref()).collect();
                arrow::compute::concat(&parts).unwrap_or_else(|e| {
                    crate::error::raise(pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("cannot gather lookup keys: {e}"), None)
                })
            })
            .collect()
        };
        self.probe_keys(&columns)
    }

    /// The common probe — one integer value for a `bigint` key — as its array, built without
    /// the general conversion.
    fn single_integer_key(&self, per_column: &[Vec<pg_sys::Datum>]) -> Option<ArrayRef> {
        let ([values], [kind]) = (per_column, self.kinds.as_slice()) else { return None };
        let [value] = values.as_slice() else { return None };
        if self.key_schema.field(0).data_type() != &arrow::datatypes::DataType::Int64 {
            return None;
        }
        // SAFETY: the datum is of the expression's type, `kind`.
        let value = unsafe {
            use pgrx::FromDatum;
            match kind {
                PgKind::Int2 => i64::from(i16::from_datum(*value, false)?),
                PgKind::Int4 => i64::from(i32::from_datum(*value, false)?),
                PgKind::Int8 => i64::from_datum(*value, false)?,
                _ => return None,
            }
        };
        Some(std::sync::Arc::new(arrow::array::Int64Array::from(vec![value])))
    }

    /// Probes the cache for the keys `columns` (the index's columns).
    fn probe_keys(&mut self, columns: &[ArrayRef]) -> Option<Option<RecordBatch>> {
        self.probes += columns.first().map_or(0, |c| c.len()) as u64;
        let rows = with_open(self.relid, |cache| cache.probe(self.plan.index, columns, &self.projection))?.or_report();
        self.found += rows.num_rows() as u64;
        Some((rows.num_rows() > 0).then_some(rows))
    }

    /// Probes again at the next call, with the values then.
    pub fn restart(&mut self) {
        self.done = false;
    }
}
