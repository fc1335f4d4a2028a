//! Groups of a `GROUP BY`: each distinct combination of key values (as read, so that `-0`
//! and `0`, or two nanoseconds of one microsecond, are one group) gets a number, in order of
//! first appearance.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{self as types, ArrowPrimitiveType, DataType};
use arrow::row::{RowConverter, Rows, SortField};
use hashbrown::hash_table::{Entry, HashTable};

use crate::error::{Error, ErrorKind, Result};

fn kernel(e: arrow::error::ArrowError) -> Error {
    Error::new(ErrorKind::Internal, "cannot group rows").with_source(e)
}

/// The groups seen so far; with no key columns, the one group of an aggregate without
/// `GROUP BY` (which has a row even when no row is added).
///
/// Each group's key is stored once, in the list of keys by number, and the index holds group
/// numbers (with the key itself when it is one integer): a `GROUP BY` of an order key over 5M
/// lines has 1.25M groups, and a key allocated apart per group cost more than the sums.
pub(crate) struct Groups {
    keyed: Option<Keyed>,
    hasher: foldhash::fast::RandomState,
}

enum Keyed {
    /// One column of integers, dates or timestamps: keys are the values, widened to 64 bits.
    Integer(IntegerKeys),
    /// Other keys: each group's key in Arrow's row format.
    Rows(RowKeys),
}

struct IntegerKeys {
    data_type: DataType,
    /// Each key with its group's number: a probe reads one place in memory, not two.
    index: HashTable<(i64, u32)>,
    /// The key of each group, by number (0 for the NULL group).
    values: Vec<i64>,
    /// The number of the NULL group, once there is one.
    null: Option<u32>,
}

struct RowKeys {
    converter: RowConverter,
    index: HashTable<u32>,
    /// The key of each group, by number.
    keys: Rows,
}

impl Groups {
    /// Groups by columns of the `key_types` (none: a single group).
    pub(crate) fn new(key_types: &[DataType]) -> Result<Groups> {
        let hasher = foldhash::fast::RandomState::default();
        let keyed = match key_types {
            [] => None,
            [one] if is_integer_valued(one) => {
                Some(Keyed::Integer(IntegerKeys { data_type: one.clone(), index: HashTable::new(), values: Vec::new(), null: None }))
            }
            _ => {
                let converter = RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(kernel)?;
                let keys = converter.empty_rows(0, 0);
                Some(Keyed::Rows(RowKeys { converter, index: HashTable::new(), keys }))
            }
        };
        Ok(Groups { keyed, hasher })
    }

    /// The number of groups.
    pub(crate) fn len(&self) -> usize {
        match &self.keyed {
            None => 1,
            Some(Keyed::Integer(k)) => k.values.len(),
            Some(Keyed::Rows(k)) => k.keys.num_rows(),
        }
    }

    /// The group of each row of the `keys` columns (`None`: all rows are in group 0),
    /// numbering new groups.
    pub(crate) fn assign(&mut self, keys: &[ArrayRef]) -> Result<Option<Vec<u32>>> {
        let hasher = &self.hasher;
        match &mut self.keyed {
            None => Ok(None),
            Some(Keyed::Integer(k)) => {
                let column = to_i64(keys[0].as_ref())?;
                let mut ids = Vec::with_capacity(column.len());
                for value in column.iter() {
                    let id = match value {
                        None => *k.null.get_or_insert_with(|| {
                            k.values.push(0);
                            (k.values.len() - 1) as u32
                        }),
                        Some(value) => {
                            let hash = hasher.hash_one(value);
                            match k.index.entry(hash, |&(key, _)| key == value, |&(key, _)| hasher.hash_one(key)) {
                                Entry::Occupied(entry) => entry.get().1,
                                Entry::Vacant(entry) => {
                                    let id = k.values.len() as u32;
                                    entry.insert((value, id));
                                    k.values.push(value);
                                    id
                                }
                            }
                        }
                    };
                    ids.push(id);
                }
                Ok(Some(ids))
            }
            Some(Keyed::Rows(k)) => {
                let rows = k.converter.convert_columns(keys).map_err(kernel)?;
                let mut ids = Vec::with_capacity(rows.num_rows());
                for row in rows.iter() {
                    let (bytes, known) = (row.as_ref(), &mut k.keys);
                    let hash = hasher.hash_one(bytes);
                    let entry = k.index.entry(
                        hash,
                        |&id| known.row(id as usize).as_ref() == bytes,
                        |&id| hasher.hash_one(known.row(id as usize).as_ref()),
                    );
                    let id = match entry {
                        Entry::Occupied(entry) => *entry.get(),
                        Entry::Vacant(entry) => {
                            let id = known.num_rows() as u32;
                            entry.insert(id);
                            known.push(row);
                            id
                        }
                    };
                    ids.push(id);
                }
                Ok(Some(ids))
            }
        }
    }

    /// The key columns of the groups, by number.
    pub(crate) fn keys(&self) -> Result<Vec<ArrayRef>> {
        match &self.keyed {
            None => Ok(Vec::new()),
            Some(Keyed::Integer(k)) => {
                let nulls = k.null.map(|null| (0..k.values.len()).map(|id| id != null as usize).collect());
                let values = Int64Array::new(k.values.clone().into(), nulls);
                Ok(vec![from_i64(values, &k.data_type)?])
            }
            Some(Keyed::Rows(k)) => k.converter.convert_rows(k.keys.iter()).map_err(kernel),
        }
    }
}

/// Whether a key column of this type groups by its values as 64-bit integers.
fn is_integer_valued(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)
    )
}

fn widen<T: ArrowPrimitiveType>(array: &dyn Array) -> Int64Array
where
    T::Native: Into<i64>,
{
    array.as_primitive::<T>().unary(|v| v.into())
}

/// A key column of an [`is_integer_valued`] type as 64-bit integers.
fn to_i64(array: &dyn Array) -> Result<Int64Array> {
    Ok(match array.data_type() {
        DataType::Int8 => widen::<types::Int8Type>(array),
        DataType::Int16 => widen::<types::Int16Type>(array),
        DataType::Int32 => widen::<types::Int32Type>(array),
        DataType::Date32 => widen::<types::Date32Type>(array),
        // 64-bit values: the same buffer, seen as integers.
        _ => Int64Array::from(array.to_data().into_builder().data_type(DataType::Int64).build().map_err(kernel)?),
    })
}

/// The inverse of [`to_i64`]: the values came from a column of `data_type`, so narrowing is exact.
fn from_i64(values: Int64Array, data_type: &DataType) -> Result<ArrayRef> {
    Ok(match data_type {
        DataType::Int8 => Arc::new(values.unary::<_, types::Int8Type>(|v| v as i8)),
        DataType::Int16 => Arc::new(values.unary::<_, types::Int16Type>(|v| v as i16)),
        DataType::Int32 => Arc::new(values.unary::<_, types::Int32Type>(|v| v as i32)),
        DataType::Date32 => Arc::new(values.unary::<_, types::Date32Type>(|v| v as i32)),
        _ => make_array(values.into_data().into_builder().data_type(data_type.clone()).build().map_err(kernel)?),
    })
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

    #[test]
    fn integer_valued_keys_keep_their_type_and_nulls() {
        use arrow::array::{Date32Array, Int16Array, Int32Array, TimestampMicrosecondArray};
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int16Array::from(vec![Some(-3), None, Some(7), Some(-3), None])),
            Arc::new(Int32Array::from(vec![Some(i32::MIN), None, Some(i32::MAX), Some(i32::MIN), None])),
            Arc::new(Date32Array::from(vec![Some(19000), None, Some(-1), Some(19000), None])),
            Arc::new(TimestampMicrosecondArray::from(vec![Some(i64::MIN), None, Some(5), Some(i64::MIN), None]).with_timezone("UTC")),
        ];
        for column in columns {
            let mut groups = Groups::new(&[column.data_type().clone()]).unwrap();
            assert!(matches!(groups.keyed, Some(Keyed::Integer(_))), "{}", column.data_type());
            assert_eq!(groups.assign(&[column.clone()]).unwrap(), Some(vec![0, 1, 2, 0, 1]));
            // A slice of the column (an offset into its buffers) groups the same.
            assert_eq!(groups.assign(&[column.slice(2, 3)]).unwrap(), Some(vec![2, 0, 1]));
            let keys = groups.keys().unwrap();
            assert_eq!(keys[0].as_ref(), column.slice(0, 3).as_ref(), "{}", column.data_type());
        }
    }
}
