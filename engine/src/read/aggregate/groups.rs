//! Groups of a `GROUP BY`: each distinct combination of key values (as read, so that `-0`
//! and `0`, or two nanoseconds of one microsecond, are one group) gets a number, in order of
//! first appearance.

use arrow::array::ArrayRef;
use arrow::row::{RowConverter, Rows, SortField};

use crate::error::{Error, ErrorKind, Result};

type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

fn kernel(e: arrow::error::ArrowError) -> Error {
    Error::new(ErrorKind::Internal, "cannot group rows").with_source(e)
}

/// The groups seen so far; with no key columns, the one group of an aggregate without
/// `GROUP BY` (which has a row even when no row is added).
pub(crate) struct Groups {
    keyed: Option<Keyed>,
}

struct Keyed {
    converter: RowConverter,
    numbers: FastMap<Box<[u8]>, u32>,
    /// The key of each group, by number.
    keys: Rows,
}

impl Groups {
    /// Groups by columns of the `key_types` (none: a single group).
    pub(crate) fn new(key_types: &[arrow::datatypes::DataType]) -> Result<Groups> {
        if key_types.is_empty() {
            return Ok(Groups { keyed: None });
        }
        let converter = RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(kernel)?;
        let keys = converter.empty_rows(0, 0);
        Ok(Groups { keyed: Some(Keyed { converter, numbers: FastMap::default(), keys }) })
    }

    /// The number of groups.
    pub(crate) fn len(&self) -> usize {
        self.keyed.as_ref().map_or(1, |k| k.keys.num_rows())
    }

    /// The group of each row of the `keys` columns (`None`: all rows are in group 0),
    /// numbering new groups.
    pub(crate) fn assign(&mut self, keys: &[ArrayRef]) -> Result<Option<Vec<u32>>> {
        let Some(keyed) = &mut self.keyed else { return Ok(None) };
        let rows = keyed.converter.convert_columns(keys).map_err(kernel)?;
        let mut ids = Vec::with_capacity(rows.num_rows());
        for row in rows.iter() {
            let next = keyed.keys.num_rows() as u32;
            let id = match keyed.numbers.get(row.as_ref()) {
                Some(&id) => id,
                None => {
                    keyed.numbers.insert(row.as_ref().into(), next);
                    keyed.keys.push(row);
                    next
                }
            };
            ids.push(id);
        }
        Ok(Some(ids))
    }

    /// The key columns of the groups, by number.
    pub(crate) fn keys(&self) -> Result<Vec<ArrayRef>> {
        match &self.keyed {
            None => Ok(Vec::new()),
            Some(keyed) => keyed.converter.convert_rows(keyed.keys.iter()).map_err(kernel),
        }
    }
}

/// Where each row goes: `ids[row]`, or group 0 for every row when `ids` is `None`.
#[derive(Clone, Copy)]
pub(crate) struct RowGroups<'a> {
    pub ids: Option<&'a [u32]>,
    /// How many groups there are (accumulators grow to this).
    pub count: usize,
}

impl RowGroups<'_> {
    pub(crate) fn of(&self, row: usize) -> usize {
        self.ids.map_or(0, |ids| ids[row] as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::DataType;
    use std::sync::Arc;

    #[test]
    fn numbers_groups_in_order_of_appearance() {
        let mut groups = Groups::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), Some("y"), Some("x"), None]));
        let b: ArrayRef = Arc::new(Int64Array::from(vec![1, 1, 1, 1]));
        assert_eq!(groups.assign(&[a.clone(), b.clone()]).unwrap(), Some(vec![0, 1, 0, 2]));
        let a2: ArrayRef = Arc::new(StringArray::from(vec![None, Some("z")]));
        let b2: ArrayRef = Arc::new(Int64Array::from(vec![1, 1]));
        assert_eq!(groups.assign(&[a2, b2]).unwrap(), Some(vec![2, 3]));
        let keys = groups.keys().unwrap();
        assert_eq!(keys[0].as_string::<i32>().iter().collect::<Vec<_>>(), vec![Some("x"), Some("y"), None, Some("z")]);
        let mut single = Groups::new(&[]).unwrap();
        assert_eq!(single.assign(&[]).unwrap(), None);
        assert_eq!(single.len(), 1);
    }
}
