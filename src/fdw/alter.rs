//! Schema evolution from `ALTER FOREIGN TABLE` (a utility hook): `ADD COLUMN` of a column the
//! Hudi table lacks, and `ALTER COLUMN … TYPE` to a wider type, change the Hudi table's schema
//! too — in the DDL's transaction, as a commit that records the new schema (Hudi's schema
//! evolution on write, operation `ALTER_SCHEMA`), completed when the transaction commits like
//! any write. Old files then read NULL for an added column and their values in the wider type,
//! for pg_hudi, Spark and the reference reader alike; other servers' foreign tables of the table
//! find the new columns when they declare them. What Hudi cannot express (a NOT NULL or DEFAULT
//! column, a narrower or other type, renaming a column of the table) is refused before anything
//! changes. Declarations alone (a column already in the Hudi table, dropping a column from the
//! declaration, options) change nothing in the lake.

use std::ffi::CStr;

use engine::write::schema::{evolve, SchemaChange};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::error::{raise, OrReport};
use crate::fdw::table::ForeignHudiTable;

static mut PREVIOUS: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook, after whatever hook was there (called once, from `_PG_init`).
pub fn install() {
    // SAFETY: hooks are plain globals set while the library loads, on the main thread.
    unsafe {
        PREVIOUS = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
    }
}

#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    let statement = (*pstmt).utilityStmt;
    let evolution = match (*statement).type_ {
        pg_sys::NodeTag::T_AlterTableStmt => schema_change(statement as *mut pg_sys::AlterTableStmt),
        pg_sys::NodeTag::T_RenameStmt => {
            refuse_column_rename(statement as *mut pg_sys::RenameStmt);
            None
        }
        _ => None,
    };
    match PREVIOUS {
        Some(previous) => previous(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
        None => pg_sys::standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
    }
    // The catalog changed: the Hudi table changes with it, in the same transaction.
    if let Some(Evolution { relid, table, schema }) = evolution {
        crate::xact::with_open_write(relid, || crate::fdw::modify::new_write(&table, relid, false), |write| {
            write.transaction.change_schema(schema).or_report();
        });
        crate::fdw::table_state::forget_all();
    }
}

/// A schema change of the Hudi table, for the foreign table `relid`.
struct Evolution {
    relid: pg_sys::Oid,
    table: ForeignHudiTable,
    /// The new Avro schema.
    schema: String,
}

/// The relation that ALTER or RENAME names, if it is a Hudi foreign table that the current user
/// owns. Anyone else's statement goes to PostgreSQL untouched, which refuses it (42501): the
/// hook reads no storage, and says nothing of the Hudi table, for a role that may not alter it.
unsafe fn hudi_relation(relation: *mut pg_sys::RangeVar) -> Option<pg_sys::Oid> {
    if relation.is_null() {
        return None;
    }
    let relid = pg_sys::RangeVarGetRelidExtended(relation, pg_sys::NoLock as _, pg_sys::RVROption::RVR_MISSING_OK as _, None, std::ptr::null_mut());
    let hudi = relid != pg_sys::InvalidOid && crate::fdw::table::is_hudi_table(relid);
    (hudi && pg_sys::pg_class_ownercheck(relid, pg_sys::GetUserId())).then_some(relid)
}

/// The Arrow type a column of `type_name` is stored as.
unsafe fn stored_type(type_name: *mut pg_sys::TypeName, column: &str, table: &str) -> arrow::datatypes::DataType {
    let (mut typid, mut typmod) = (pg_sys::InvalidOid, -1);
    pg_sys::typenameTypeIdAndMod(std::ptr::null_mut(), type_name, &mut typid, &mut typmod);
    crate::datum::stored_type(typid, typmod).unwrap_or_else(|why| {
        raise(PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE, format!("column \"{column}\" of foreign table \"{table}\": {why}"), None)
    })
}

/// Checks the commands of an ALTER of a Hudi foreign table and computes the schema they give
/// the Hudi table: `None` when they change nothing there.
unsafe fn schema_change(stmt: *mut pg_sys::AlterTableStmt) -> Option<Evolution> {
    let relid = hudi_relation((*stmt).relation)?;
    let name = crate::fdw::table::relation_name(relid);
    let mut changes = Vec::new();
    for cmd in crate::fdw::pushdown::list_items::<pg_sys::AlterTableCmd>((*stmt).cmds) {
        match (*cmd).subtype {
            pg_sys::AlterTableType::AT_AddColumn => {
                let def = (*cmd).def as *mut pg_sys::ColumnDef;
                let column = CStr::from_ptr((*def).colname).to_string_lossy().into_owned();
                if engine::read::schema::is_reader_column(&column) || engine::read::schema::META_FIELDS.contains(&column.as_str()) {
                    continue;
                }
                let constraints = crate::fdw::pushdown::list_items::<pg_sys::Constraint>((*def).constraints);
                let refused = |what: &str, hint: &str| -> ! {
                    raise(
                        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                        format!("column \"{column}\" of Hudi table \"{name}\" cannot be added {what}"),
                        Some(hint.into()),
                    )
                };
                if (*def).is_not_null || constraints.iter().any(|c| (**c).contype == pg_sys::ConstrType::CONSTR_NOTNULL) {
                    refused("NOT NULL", "Hudi adds columns nullable: the rows already written read NULL in them. Add it without NOT NULL.");
                }
                if !(*def).raw_default.is_null() || constraints.iter().any(|c| (**c).contype == pg_sys::ConstrType::CONSTR_DEFAULT) {
                    refused(
                        "with a DEFAULT",
                        "The rows already written would read NULL, not the default. Add the column without DEFAULT, then ALTER COLUMN … SET DEFAULT for new rows.",
                    );
                }
                changes.push(SchemaChange::AddColumn { data_type: stored_type((*def).typeName, &column, &name), name: column });
            }
            pg_sys::AlterTableType::AT_AlterColumnType => {
                let def = (*cmd).def as *mut pg_sys::ColumnDef;
                let column = CStr::from_ptr((*cmd).name).to_string_lossy().into_owned();
                if engine::read::schema::is_reader_column(&column) || engine::read::schema::META_FIELDS.contains(&column.as_str()) {
                    continue;
                }
                changes.push(SchemaChange::Widen { data_type: stored_type((*def).typeName, &column, &name), name: column });
            }
            _ => {}
        }
    }
    if changes.is_empty() {
        return None;
    }
    let table = ForeignHudiTable::of_relation(relid);
    let (_, current) = table.config_and_schema(&table.storage());
    let mut schema = current.clone();
    for change in &changes {
        if let Some(evolved) = evolve(&schema, change).or_report() {
            schema = evolved;
        }
    }
    if schema == current {
        return None;
    }
    if let Some((option, value)) = table.read_only_option() {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("foreign table \"{name}\" cannot change its Hudi table's schema: it reads the table with {option} \"{value}\""),
            Some("Change the schema through a foreign table declared without query_type and as_of_instant; then declare the column here.".into()),
        );
    }
    crate::fdw::modify::refuse_in_subtransaction();
    if crate::xact::writes_to(&table.uri.to_string()) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("the schema of Hudi table \"{name}\" cannot change after this transaction wrote to it"),
            Some("Commit the writes first, then ALTER the foreign table.".into()),
        );
    }
    Some(Evolution { relid, table, schema })
}

/// Refuses renaming a column of a Hudi foreign table that the Hudi table has: the name is how
/// the column is found in every file, and Hudi's schema evolution on write cannot rename.
unsafe fn refuse_column_rename(stmt: *mut pg_sys::RenameStmt) {
    if (*stmt).renameType != pg_sys::ObjectType::OBJECT_COLUMN || (*stmt).subname.is_null() {
        return;
    }
    let Some(relid) = hudi_relation((*stmt).relation) else { return };
    let column = CStr::from_ptr((*stmt).subname).to_string_lossy().into_owned();
    let table = ForeignHudiTable::of_relation(relid);
    let (_, current) = table.config_and_schema(&table.storage());
    let fields = engine::read::schema::arrow_schema_of_avro(&current).or_report();
    if fields.field_with_name(&column).is_ok() {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("column \"{column}\" of Hudi table \"{}\" cannot be renamed", crate::fdw::table::relation_name(relid)),
            Some("Hudi finds a column by its name in every file, and its schema evolution on write cannot rename one. Add a column with the new name and copy the values with UPDATE.".into()),
        );
    }
}
