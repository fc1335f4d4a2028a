//! Where UPDATE and DELETE read their rows, so that the log blocks they write name the base
//! file rows they replace (record positions, which let readers merge without comparing keys).
//!
//! The scan of an UPDATE or DELETE target returns `ctid` as a row identity column, as
//! postgres_fdw does. Its 48 bits hold an *origin* number (20 bits: a base file of a file
//! slice, numbered per backend in the order scans meet them) and the row's position in that
//! base file (28 bits). Rows that are not in a base file (only the logs have them), and
//! positions or origins that do not fit, get the invalid ctid and are written without
//! positions, which readers merge by key as before.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use engine::write::{BaseFileRef, BaseRow};
use pgrx::pg_sys;

const POSITION_BITS: u32 = 28;
/// Origin numbers below this leave the block number of every ctid valid (not all ones).
const MAX_ORIGINS: usize = (1 << 20) - 1;

/// The base files rows were read from in this transaction: `(table URI, base file)` by origin
/// number.
#[derive(Default)]
struct Origins {
    bases: Vec<(String, Arc<BaseFileRef>)>,
    numbers: HashMap<(String, Arc<BaseFileRef>), u32>,
}

thread_local! {
    static ORIGINS: RefCell<Origins> = RefCell::new(Origins::default());
}

/// The origin number of `base` of the table at `uri`; `None` when the transaction has read
/// more base files than ctids can tell apart.
pub fn origin(uri: &str, base: BaseFileRef) -> Option<u32> {
    ORIGINS.with(|origins| {
        let mut origins = origins.borrow_mut();
        let key = (uri.to_owned(), Arc::new(base));
        if let Some(&number) = origins.numbers.get(&key) {
            return Some(number);
        }
        if origins.bases.len() >= MAX_ORIGINS {
            return None;
        }
        let number = origins.bases.len() as u32;
        origins.bases.push(key.clone());
        origins.numbers.insert(key, number);
        Some(number)
    })
}

/// The ctid of the row at `position` of the base file numbered `origin` (the invalid ctid
/// when either is unknown or too large).
pub fn row_tid(origin: Option<u32>, position: Option<u64>) -> pg_sys::ItemPointerData {
    let value = match (origin, position) {
        (Some(origin), Some(position)) if position < 1 << POSITION_BITS => (u64::from(origin) << POSITION_BITS) | position,
        _ => return invalid_tid(),
    };
    let block = (value >> 16) as u32;
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (block >> 16) as u16, bi_lo: block as u16 },
        ip_posid: value as u16,
    }
}

fn invalid_tid() -> pg_sys::ItemPointerData {
    pg_sys::ItemPointerData { ip_blkid: pg_sys::BlockIdData { bi_hi: u16::MAX, bi_lo: u16::MAX }, ip_posid: 0 }
}

/// Where the row with ctid `tid` was read, when a scan of the table at `uri` in this
/// transaction read it from a base file.
pub fn base_row(uri: &str, tid: &pg_sys::ItemPointerData) -> Option<BaseRow> {
    let block = (u32::from(tid.ip_blkid.bi_hi) << 16) | u32::from(tid.ip_blkid.bi_lo);
    if block == u32::MAX {
        return None;
    }
    let value = (u64::from(block) << 16) | u64::from(tid.ip_posid);
    let origin = (value >> POSITION_BITS) as usize;
    let position = value & ((1 << POSITION_BITS) - 1);
    ORIGINS.with(|origins| {
        let origins = origins.borrow();
        let (table, base) = origins.bases.get(origin)?;
        (table == uri).then(|| BaseRow { base: base.clone(), position })
    })
}

/// Forgets the origins at the end of a transaction: buffered rows hold their base files.
pub fn forget_all() {
    ORIGINS.with(|origins| *origins.borrow_mut() = Origins::default());
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;

    fn base(file_id: &str) -> BaseFileRef {
        BaseFileRef { partition: "p=1".into(), file_id: file_id.into(), instant: "20260101000000000".into() }
    }

    #[pgrx::pg_test]
    fn ctids_carry_base_rows_of_their_own_table_only() {
        forget_all();
        let a = origin("file:///t", base("a")).unwrap();
        let b = origin("file:///t", base("b")).unwrap();
        assert_eq!(origin("file:///t", base("a")), Some(a));
        for position in [0, 1, 65_535, 65_536, (1 << POSITION_BITS) - 1] {
            let row = base_row("file:///t", &row_tid(Some(b), Some(position))).unwrap();
            assert_eq!((row.base.file_id.as_str(), row.position), ("b", position));
        }
        assert!(base_row("file:///other", &row_tid(Some(a), Some(7))).is_none());
        assert!(base_row("file:///t", &row_tid(Some(a), Some(1 << POSITION_BITS))).is_none());
        assert!(base_row("file:///t", &row_tid(Some(a), None)).is_none());
        forget_all();
        assert!(base_row("file:///t", &row_tid(Some(a), Some(7))).is_none());
    }
}
