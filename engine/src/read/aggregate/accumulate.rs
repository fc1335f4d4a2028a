//! Accumulators: the state of one aggregate for every group, fed rows (a slice's, on a helper
//! thread) or the partial states of other accumulators (the slices' results, combined on the
//! caller's). They keep PostgreSQL's arithmetic: exact sums of integers and decimals (in 256
//! bits, so no count of rows overflows them), floats added as `float4pl`/`float8pl` add them
//! and averaged as `float8_accum`/`float8_combine` do, with the same overflow errors.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Decimal256Array, Float32Array, Float64Array};
use arrow::array::{Int64Array, Int8Array, PrimitiveArray, StringArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{self as types, i256, ArrowNativeTypeOp, DataType};

use super::groups::RowGroups;
use crate::read::expression::{decimal_text, per_value_fields};
use crate::read::reading::Reading;
use crate::error::{Error, ErrorKind, Result};

/// The state of one aggregate for every group.
pub(crate) trait Accumulator: Send {
    /// Adds rows: the aggregate's input as read (`None` for `count(*)`, with `rows` rows).
    fn update(&mut self, input: Option<&ArrayRef>, rows: usize, groups: RowGroups) -> Result<()>;
    /// Adds partial states, one row per group of another accumulator ([`Self::state`]).
    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()>;
    /// Makes room for `count` groups (a group without input has the state of no values).
    fn grow(&mut self, count: usize);
    /// The partial state: columns with a row per group.
    fn state(&self) -> Result<Vec<ArrayRef>>;
    /// The result columns, a row per group.
    fn finish(&self) -> Result<Vec<ArrayRef>> {
        self.state()
    }
}

pub(crate) fn overflow() -> Error {
    Error::new(ErrorKind::OutOfRange, "value out of range: overflow")
}

fn wrong_input(array: &dyn Array) -> Error {
    Error::new(ErrorKind::Internal, format!("an aggregate got a column of type {}", array.data_type()))
}

fn grow<T: Clone>(values: &mut Vec<T>, count: usize, empty: T) {
    if values.len() < count {
        values.resize(count, empty);
    }
}

/// `count(*)` (no input) and `count(column)`.
#[derive(Default)]
pub(crate) struct Count {
    counts: Vec<i64>,
}

impl Accumulator for Count {
    fn grow(&mut self, count: usize) {
        grow(&mut self.counts, count, 0);
    }

    fn update(&mut self, input: Option<&ArrayRef>, rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.counts, groups.count, 0);
        match (input, groups.ids) {
            (None, None) => self.counts[0] += rows as i64,
            (Some(input), None) => self.counts[0] += (input.len() - input.null_count()) as i64,
            (None, Some(ids)) => ids.iter().for_each(|&g| self.counts[g as usize] += 1),
            (Some(input), Some(ids)) => {
                for (row, &g) in ids.iter().enumerate() {
                    self.counts[g as usize] += i64::from(input.is_valid(row));
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        grow(&mut self.counts, groups.count, 0);
        let counts = states[0].as_primitive_opt::<types::Int64Type>().ok_or_else(|| wrong_input(&states[0]))?;
        for (row, count) in counts.values().iter().enumerate() {
            self.counts[groups.of(row)] += count;
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(Int64Array::from(self.counts.clone()))])
    }
}

/// The exact sum of integers or decimals at `scale`; NULL for a group without values.
///
/// Sums are kept in 128 bits while they fit (16 bytes a group: a `GROUP BY` can have millions)
/// and all in 256 bits once one does not, so no count of rows overflows them.
///
/// Of values with a display scale each ([`crate::read::expression::per_value_type`]), each
/// group's sum has the largest of its values' scales, as PostgreSQL's `numeric` sums have: its
/// state is a struct of sum and display scale, its result the sum's text at that scale.
pub(crate) struct ExactSum {
    narrow: Vec<i128>,
    /// Every group's sum, once one left 128 bits (`narrow` is then empty).
    wide: Option<Vec<i256>>,
    /// Whether a group has a value (a sum of none is NULL).
    seen: Vec<bool>,
    scale: i8,
    /// Each group's display scale, for values with a display scale each.
    display: Option<Vec<i8>>,
}

impl ExactSum {
    pub(crate) fn new(scale: i8) -> ExactSum {
        ExactSum { narrow: Vec::new(), wide: None, seen: Vec::new(), scale, display: None }
    }

    /// A sum of inputs of `data_type` as read (or partial states of such a sum).
    pub(crate) fn for_input(data_type: Option<&DataType>) -> ExactSum {
        match data_type {
            Some(DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale)) => ExactSum::new(*scale),
            Some(DataType::Struct(fields)) => match fields.first().map(|f| f.data_type()) {
                Some(DataType::Decimal256(_, scale)) => ExactSum { display: Some(Vec::new()), ..ExactSum::new(*scale) },
                _ => ExactSum::new(0),
            },
            _ => ExactSum::new(0),
        }
    }

    /// Adds values with a display scale each, or partial states of such sums: both structs of
    /// a 256-bit decimal at this sum's scale and a display scale.
    fn add_scaled(&mut self, input: &ArrayRef, groups: RowGroups) -> Result<()> {
        let parts = input.as_struct_opt().filter(|s| s.num_columns() == 2).ok_or_else(|| wrong_input(input))?;
        let values = parts.column(0).as_primitive_opt::<types::Decimal256Type>().ok_or_else(|| wrong_input(input))?;
        let scales = parts.column(1).as_primitive_opt::<types::Int8Type>().ok_or_else(|| wrong_input(input))?;
        let mut display = self.display.take().ok_or_else(|| wrong_input(input))?;
        for row in 0..input.len() {
            if input.is_valid(row) && values.is_valid(row) {
                let group = groups.of(row);
                self.add_wide(group, values.value(row));
                display[group] = display[group].max(scales.value(row));
            }
        }
        self.display = Some(display);
        Ok(())
    }

    fn sums(&self) -> Decimal256Array {
        match &self.wide {
            Some(wide) => self.seen.iter().zip(wide).map(|(&seen, &sum)| seen.then_some(sum)).collect(),
            None => self.seen.iter().zip(&self.narrow).map(|(&seen, &sum)| seen.then_some(i256::from_i128(sum))).collect(),
        }
    }

    fn add(&mut self, group: usize, value: i128) {
        self.seen[group] = true;
        if let Some(wide) = &mut self.wide {
            wide[group] = wide[group].wrapping_add(i256::from_i128(value));
        } else if let Some(sum) = self.narrow[group].checked_add(value) {
            self.narrow[group] = sum;
        } else {
            self.widen();
            self.add(group, value);
        }
    }

    fn add_wide(&mut self, group: usize, value: i256) {
        if let Some(value) = value.to_i128() {
            return self.add(group, value);
        }
        self.seen[group] = true;
        self.widen();
        let wide = self.wide.as_mut().expect("widened above");
        // 2^255 is beyond any sum of i128 values a table can hold: wrapping never happens.
        wide[group] = wide[group].wrapping_add(value);
    }

    fn widen(&mut self) {
        if self.wide.is_none() {
            self.wide = Some(std::mem::take(&mut self.narrow).into_iter().map(i256::from_i128).collect());
        }
    }

    fn add_all<T: ArrowPrimitiveType>(&mut self, values: &PrimitiveArray<T>, groups: RowGroups, widen: impl Fn(T::Native) -> i128) {
        if groups.ids.is_none() && values.null_count() < values.len() {
            // One group: the column's sum in its own width when that cannot overflow.
            if let Ok(Some(sum)) = arrow::compute::sum_checked(values) {
                self.add(0, widen(sum));
                return;
            }
        }
        self.add_each(values, groups, widen);
    }

    /// [`Self::add_all`] for integers of up to 32 bits: one group's sum is taken in 64 bits,
    /// which 2^32 rows of them cannot overflow (no cast of the column to 64 bits first).
    fn add_narrow<T: ArrowPrimitiveType>(&mut self, values: &PrimitiveArray<T>, groups: RowGroups)
    where
        T::Native: Into<i64>,
    {
        if groups.ids.is_none() && values.null_count() < values.len() && (values.len() as u64) < 1 << 32 {
            let sum: i64 = match values.nulls() {
                None => values.values().iter().map(|&v| v.into()).sum(),
                Some(nulls) => masked_sum(values.values(), nulls),
            };
            self.add(0, i128::from(sum));
            return;
        }
        self.add_each(values, groups, |v| i128::from(v.into()));
    }

    fn add_each<T: ArrowPrimitiveType>(&mut self, values: &PrimitiveArray<T>, groups: RowGroups, widen: impl Fn(T::Native) -> i128) {
        for (row, value) in values.iter().enumerate() {
            if let Some(value) = value {
                self.add(groups.of(row), widen(value));
            }
        }
    }
}

/// For each byte, a lane mask per bit: all ones where the bit is set.
const BYTE_LANES: [[i64; 8]; 256] = {
    let mut lanes = [[0i64; 8]; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut bit = 0;
        while bit < 8 {
            if (byte >> bit) & 1 == 1 {
                lanes[byte][bit] = -1;
            }
            bit += 1;
        }
        byte += 1;
    }
    lanes
};

/// The sum of the `values` whose bit in `valid` is set (a merged slice's rows come masked,
/// the replaced ones scattered): in one pass, each value widened and ANDed with its bit's lane
/// mask, eight at a time, which vectorises as a plain sum does; nothing is allocated.
fn masked_sum<N: Copy + Into<i64>>(values: &[N], valid: &NullBuffer) -> i64 {
    let mut lanes = [0i64; 8];
    let mut add = |values: &[N], bits: u64| {
        for (byte, part) in values.chunks(8).enumerate() {
            let mask = &BYTE_LANES[((bits >> (byte * 8)) & 0xff) as usize];
            for (lane, (&value, &keep)) in lanes.iter_mut().zip(part.iter().zip(mask)) {
                *lane += value.into() & keep;
            }
        }
    };
    let words = valid.inner().bit_chunks();
    let mut blocks = values.chunks_exact(64);
    for (bits, block) in words.iter().zip(&mut blocks) {
        add(block, bits);
    }
    add(blocks.remainder(), words.remainder_bits());
    lanes.iter().sum()
}

impl Accumulator for ExactSum {
    fn grow(&mut self, count: usize) {
        grow(&mut self.seen, count, false);
        match &mut self.wide {
            Some(wide) => grow(wide, count, i256::ZERO),
            None => grow(&mut self.narrow, count, 0),
        }
        if let Some(display) = &mut self.display {
            grow(display, count, 0);
        }
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        self.grow(groups.count);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "sum without an input"))?;
        match input.data_type() {
            DataType::Int64 => self.add_all(input.as_primitive::<types::Int64Type>(), groups, i128::from),
            DataType::Int32 => self.add_narrow(input.as_primitive::<types::Int32Type>(), groups),
            DataType::Int16 => self.add_narrow(input.as_primitive::<types::Int16Type>(), groups),
            DataType::Int8 => self.add_narrow(input.as_primitive::<types::Int8Type>(), groups),
            DataType::UInt32 => self.add_narrow(input.as_primitive::<types::UInt32Type>(), groups),
            DataType::UInt16 => self.add_narrow(input.as_primitive::<types::UInt16Type>(), groups),
            DataType::UInt8 => self.add_narrow(input.as_primitive::<types::UInt8Type>(), groups),
            DataType::Decimal128(..) => self.add_all(input.as_primitive::<types::Decimal128Type>(), groups, |v| v),
            DataType::Struct(_) => self.add_scaled(input, groups)?,
            _ => return Err(wrong_input(input)),
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.grow(groups.count);
        if self.display.is_some() {
            return self.add_scaled(&states[0], groups);
        }
        let sums = states[0].as_primitive_opt::<types::Decimal256Type>().ok_or_else(|| wrong_input(&states[0]))?;
        for (row, sum) in sums.iter().enumerate() {
            if let Some(sum) = sum {
                self.add_wide(groups.of(row), sum);
            }
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        let internal = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot build sums").with_source(e);
        let sums = self.sums().with_precision_and_scale(76, self.scale).map_err(internal)?;
        let Some(display) = &self.display else { return Ok(vec![Arc::new(sums)]) };
        let nulls = sums.nulls().cloned();
        let columns: Vec<ArrayRef> = vec![Arc::new(sums), Arc::new(Int8Array::from(display.clone()))];
        Ok(vec![Arc::new(arrow::array::StructArray::try_new(per_value_fields(76, self.scale), columns, nulls).map_err(internal)?)])
    }

    fn finish(&self) -> Result<Vec<ArrayRef>> {
        let Some(display) = &self.display else { return self.state() };
        let texts: StringArray = self.sums().iter().zip(display).map(|(sum, &display)| Some(decimal_text(sum?, self.scale, display))).collect();
        Ok(vec![Arc::new(texts)])
    }
}

/// `a + b` as PostgreSQL's `float8pl` adds: an infinite result of finite operands is an error.
fn add_floats(a: f64, b: f64) -> Result<f64> {
    let sum = a + b;
    if sum.is_infinite() && a.is_finite() && b.is_finite() {
        return Err(overflow());
    }
    Ok(sum)
}

/// The same for `real` (`float4pl`).
fn add_floats4(a: f32, b: f32) -> Result<f32> {
    let sum = a + b;
    if sum.is_infinite() && a.is_finite() && b.is_finite() {
        return Err(overflow());
    }
    Ok(sum)
}

/// `sum` of `real` (in single precision, as PostgreSQL adds them) or `double precision`.
pub(crate) struct FloatSum {
    sums: Vec<Option<f64>>,
    single: bool,
}

impl FloatSum {
    pub(crate) fn new(reading: Reading) -> FloatSum {
        FloatSum { sums: Vec::new(), single: reading == Reading::Float4 }
    }

    fn add(&mut self, group: usize, value: f64) -> Result<()> {
        let sum = &mut self.sums[group];
        *sum = Some(match *sum {
            None => value,
            Some(s) if self.single => f64::from(add_floats4(s as f32, value as f32)?),
            Some(s) => add_floats(s, value)?,
        });
        Ok(())
    }
}

impl Accumulator for FloatSum {
    fn grow(&mut self, count: usize) {
        grow(&mut self.sums, count, None);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.sums, groups.count, None);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "sum without an input"))?;
        let values: Float64Array = match input.data_type() {
            DataType::Float64 if groups.ids.is_none() && !self.single => {
                let values = input.as_primitive::<types::Float64Type>();
                let Some(sum) = arrow::compute::sum(values) else { return Ok(()) };
                // An infinite sum is an overflow unless some value is not finite itself.
                if sum.is_infinite() && values.iter().flatten().all(f64::is_finite) {
                    return Err(overflow());
                }
                return self.add(0, sum);
            }
            DataType::Float64 => input.as_primitive::<types::Float64Type>().clone(),
            DataType::Float32 => input.as_primitive::<types::Float32Type>().unary(f64::from),
            _ => return Err(wrong_input(input)),
        };
        for (row, value) in values.iter().enumerate() {
            if let Some(value) = value {
                self.add(groups.of(row), value)?;
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.update(Some(&states[0]), states[0].len(), groups)
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![match self.single {
            true => Arc::new(self.sums.iter().map(|s| s.map(|s| s as f32)).collect::<Float32Array>()),
            false => Arc::new(Float64Array::from(self.sums.clone())),
        }])
    }
}

/// `avg` of floats: PostgreSQL's `float8_accum` state (N, Sx, Sxx), with its overflow checks.
#[derive(Default)]
pub(crate) struct FloatAverage {
    states: Vec<[f64; 3]>,
}

impl FloatAverage {
    /// `float8_accum`: one more value.
    fn accumulate(state: &mut [f64; 3], value: f64) -> Result<()> {
        let [n, sx, sxx] = *state;
        let (n1, sx1) = (n + 1.0, sx + value);
        let mut sxx1 = sxx;
        if n > 0.0 {
            let tmp = value * n1 - sx1;
            sxx1 += tmp * tmp / (n1 * n);
            if sx1.is_infinite() || sxx1.is_infinite() {
                if !sx.is_infinite() && !value.is_infinite() {
                    return Err(overflow());
                }
                sxx1 = f64::NAN;
            }
        } else if value.is_nan() || value.is_infinite() {
            sxx1 = f64::NAN;
        }
        *state = [n1, sx1, sxx1];
        Ok(())
    }

    /// `float8_combine`: another state.
    fn combine(state: &mut [f64; 3], other: [f64; 3]) -> Result<()> {
        let [n1, sx1, sxx1] = *state;
        let [n2, sx2, sxx2] = other;
        if n2 == 0.0 {
            return Ok(());
        }
        if n1 == 0.0 {
            *state = other;
            return Ok(());
        }
        let n = n1 + n2;
        let sx = add_floats(sx1, sx2)?;
        let tmp = sx1 / n1 - sx2 / n2;
        let sxx = sxx1 + sxx2 + n1 * n2 * tmp * tmp / n;
        if sxx.is_infinite() && !sxx1.is_infinite() && !sxx2.is_infinite() {
            return Err(overflow());
        }
        *state = [n, sx, sxx];
        Ok(())
    }
}

impl Accumulator for FloatAverage {
    fn grow(&mut self, count: usize) {
        grow(&mut self.states, count, [0.0; 3]);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.states, groups.count, [0.0; 3]);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "avg without an input"))?;
        let values: Float64Array = match input.data_type() {
            DataType::Float64 => input.as_primitive::<types::Float64Type>().clone(),
            DataType::Float32 => input.as_primitive::<types::Float32Type>().unary(f64::from),
            _ => return Err(wrong_input(input)),
        };
        for (row, value) in values.iter().enumerate() {
            if let Some(value) = value {
                Self::accumulate(&mut self.states[groups.of(row)], value)?;
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        grow(&mut self.states, groups.count, [0.0; 3]);
        let column = |i: usize| states[i].as_primitive_opt::<types::Float64Type>().ok_or_else(|| wrong_input(&states[i]));
        let (n, sx, sxx) = (column(0)?, column(1)?, column(2)?);
        for row in 0..n.len() {
            Self::combine(&mut self.states[groups.of(row)], [n.value(row), sx.value(row), sxx.value(row)])?;
        }
        Ok(())
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok((0..3).map(|i| Arc::new(Float64Array::from_iter_values(self.states.iter().map(|s| s[i]))) as ArrayRef).collect())
    }

    /// `float8_avg`: Sx / N, NULL without values.
    fn finish(&self) -> Result<Vec<ArrayRef>> {
        let averages: Float64Array = self.states.iter().map(|[n, sx, _]| (*n > 0.0).then(|| sx / n)).collect();
        Ok(vec![Arc::new(averages)])
    }
}

/// `avg` of integers or decimals: their exact sum and count, which the host divides as it
/// divides numerics.
pub(crate) struct ExactAverage {
    sum: ExactSum,
    count: Count,
}

impl ExactAverage {
    /// An average of inputs of `data_type` as read ([`ExactSum::for_input`]).
    pub(crate) fn for_input(data_type: Option<&DataType>) -> ExactAverage {
        ExactAverage { sum: ExactSum::for_input(data_type), count: Count::default() }
    }
}

impl Accumulator for ExactAverage {
    fn grow(&mut self, count: usize) {
        self.sum.grow(count);
        self.count.grow(count);
    }

    fn update(&mut self, input: Option<&ArrayRef>, rows: usize, groups: RowGroups) -> Result<()> {
        self.sum.update(input, rows, groups)?;
        self.count.update(input, rows, groups)
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.sum.merge(&states[..1], groups)?;
        self.count.merge(&states[1..], groups)
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok([self.sum.state()?, self.count.state()?].concat())
    }

    fn finish(&self) -> Result<Vec<ArrayRef>> {
        Ok([self.sum.finish()?, self.count.state()?].concat())
    }
}

/// `min` or `max` of values as read (floats canonical, so Arrow's total order is PostgreSQL's).
pub(crate) struct Extreme<T: ArrowPrimitiveType> {
    best: Vec<Option<T::Native>>,
    max: bool,
    data_type: DataType,
}

impl<T: ArrowPrimitiveType> Extreme<T> {
    pub(crate) fn new(max: bool, data_type: DataType) -> Extreme<T> {
        Extreme { best: Vec::new(), max, data_type }
    }
}

impl<T: ArrowPrimitiveType> Accumulator for Extreme<T> {
    fn grow(&mut self, count: usize) {
        grow(&mut self.best, count, None);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.best, groups.count, None);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "min or max without an input"))?;
        let values = input.as_primitive_opt::<T>().ok_or_else(|| wrong_input(input))?;
        let wanted = if self.max { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Less };
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let best = &mut self.best[groups.of(row)];
            if best.is_none_or(|b| value.compare(b) == wanted) {
                *best = Some(value);
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.update(Some(&states[0]), states[0].len(), groups)
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        let values = PrimitiveArray::<T>::from_iter(self.best.iter().copied()).with_data_type(self.data_type.clone());
        Ok(vec![Arc::new(values)])
    }
}

/// `count(DISTINCT input)`: each group's distinct values, as read (floats canonical, so that
/// `-0` and `0`, and every NaN, are one value as PostgreSQL's equality makes them; text by
/// bytes, which the host pushes only where that is its collation's equality). A fixed-width
/// value is kept as the 128-bit integer of its bits (a column's values are of one type, and
/// decimals of one scale); text is copied only when it is new to its group. The partial state
/// is each group's values, as a list: the caller's union of the slices' sets.
#[derive(Default)]
pub(crate) struct CountDistinct {
    groups: usize,
    /// Per group, its values of a fixed-width column (grown to the groups once one comes).
    numbers: Vec<DistinctSet<i128>>,
    /// Per group, its values of a text column.
    texts: Vec<DistinctSet<Box<str>>>,
}

type DistinctSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

impl CountDistinct {
    fn insert_all(&mut self, values: &ArrayRef, group_of: impl Fn(usize) -> usize) -> Result<()> {
        if let Some(texts) = values.as_string_opt::<i32>() {
            grow(&mut self.texts, self.groups, Default::default());
            for (row, value) in texts.iter().enumerate() {
                let set = &mut self.texts[group_of(row)];
                if let Some(value) = value.filter(|v| !set.contains(*v)) {
                    set.insert(value.into());
                }
            }
            return Ok(());
        }
        grow(&mut self.numbers, self.groups, Default::default());
        let mut insert = |row: usize, value: Option<i128>| {
            if let Some(value) = value {
                self.numbers[group_of(row)].insert(value);
            }
        };
        macro_rules! numbers {
            ($type:ty, $widen:expr) => {
                values.as_primitive::<$type>().iter().enumerate().for_each(|(row, v)| insert(row, v.map($widen)))
            };
        }
        match values.data_type() {
            DataType::Int64 => numbers!(types::Int64Type, i128::from),
            DataType::Date32 => numbers!(types::Date32Type, i128::from),
            DataType::Timestamp(..) => numbers!(types::TimestampMicrosecondType, i128::from),
            DataType::Decimal128(..) => numbers!(types::Decimal128Type, |v: i128| v),
            DataType::Float32 => numbers!(types::Float32Type, |v: f32| i128::from(v.to_bits())),
            DataType::Float64 => numbers!(types::Float64Type, |v: f64| i128::from(v.to_bits())),
            DataType::Boolean => values.as_boolean().iter().enumerate().for_each(|(row, v)| insert(row, v.map(i128::from))),
            _ => return Err(wrong_input(values.as_ref())),
        }
        Ok(())
    }

    fn grow_groups(&mut self, count: usize) {
        self.groups = self.groups.max(count);
    }
}

impl Accumulator for CountDistinct {
    fn grow(&mut self, count: usize) {
        self.grow_groups(count);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        self.grow_groups(groups.count);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "count(DISTINCT) without an input"))?;
        self.insert_all(input, |row| groups.of(row))
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.grow_groups(groups.count);
        let lists = states[0].as_list_opt::<i32>().ok_or_else(|| wrong_input(&states[0]))?;
        let offsets = lists.value_offsets();
        // The row of each listed value: the group of its list.
        let mut list_of = Vec::with_capacity(lists.values().len());
        for row in 0..lists.len() {
            list_of.extend(std::iter::repeat_n(groups.of(row), (offsets[row + 1] - offsets[row]) as usize));
        }
        let values = lists.values().slice(offsets[0] as usize, list_of.len());
        self.insert_all(&values, |at| list_of[at])
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        use arrow::array::{Decimal128Builder, ListBuilder, StringBuilder};
        let list: ArrayRef = match self.texts.is_empty() {
            false => {
                let mut list = ListBuilder::new(StringBuilder::new());
                for set in self.texts.iter().chain(std::iter::repeat(&DistinctSet::default())).take(self.groups) {
                    set.iter().for_each(|v| list.values().append_value(v));
                    list.append(true);
                }
                Arc::new(list.finish())
            }
            true => {
                let mut list = ListBuilder::new(Decimal128Builder::new());
                for set in self.numbers.iter().chain(std::iter::repeat(&DistinctSet::default())).take(self.groups) {
                    set.iter().for_each(|v| list.values().append_value(*v));
                    list.append(true);
                }
                Arc::new(list.finish())
            }
        };
        Ok(vec![list])
    }

    fn finish(&self) -> Result<Vec<ArrayRef>> {
        let count = |g: usize| self.numbers.get(g).map_or(0, |s| s.len()) + self.texts.get(g).map_or(0, |s| s.len());
        Ok(vec![Arc::new(Int64Array::from_iter_values((0..self.groups).map(|g| count(g) as i64)))])
    }
}

/// `min` or `max` of text, by bytes (the host pushes it only where that is its collation).
pub(crate) struct TextExtreme {
    best: Vec<Option<String>>,
    max: bool,
}

impl TextExtreme {
    pub(crate) fn new(max: bool) -> TextExtreme {
        TextExtreme { best: Vec::new(), max }
    }
}

impl Accumulator for TextExtreme {
    fn grow(&mut self, count: usize) {
        grow(&mut self.best, count, None);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.best, groups.count, None);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "min or max without an input"))?;
        let values = input.as_string_opt::<i32>().ok_or_else(|| wrong_input(input))?;
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let best = &mut self.best[groups.of(row)];
            let better = match best {
                None => true,
                Some(b) if self.max => value > b.as_str(),
                Some(b) => value < b.as_str(),
            };
            if better {
                *best = Some(value.to_owned());
            }
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.update(Some(&states[0]), states[0].len(), groups)
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(self.best.iter().map(Option::as_deref).collect::<StringArray>())])
    }
}

/// `bool_and` (`every`) or `bool_or`.
pub(crate) struct BoolAggregate {
    values: Vec<Option<bool>>,
    and: bool,
}

impl BoolAggregate {
    pub(crate) fn new(and: bool) -> BoolAggregate {
        BoolAggregate { values: Vec::new(), and }
    }
}

impl Accumulator for BoolAggregate {
    fn grow(&mut self, count: usize) {
        grow(&mut self.values, count, None);
    }

    fn update(&mut self, input: Option<&ArrayRef>, _rows: usize, groups: RowGroups) -> Result<()> {
        grow(&mut self.values, groups.count, None);
        let input = input.ok_or_else(|| Error::new(ErrorKind::Internal, "bool_and or bool_or without an input"))?;
        let values = input.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| wrong_input(input))?;
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let current = &mut self.values[groups.of(row)];
            *current = Some(match *current {
                None => value,
                Some(c) if self.and => c && value,
                Some(c) => c || value,
            });
        }
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: RowGroups) -> Result<()> {
        self.update(Some(&states[0]), states[0].len(), groups)
    }

    fn state(&self) -> Result<Vec<ArrayRef>> {
        Ok(vec![Arc::new(BooleanArray::from(self.values.clone()))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(count: usize) -> RowGroups<'static> {
        RowGroups { ids: None, count }
    }

    #[test]
    fn distinct_counts_combine_their_partial_sets() {
        // Two slices' partials of three groups, then combined: 1.0 and 2.5 in group 0 (NaN and
        // every -0 as read are one value each), nothing in group 1, NaN in group 2.
        let nan = f64::NAN;
        let slice = |values: Vec<Option<f64>>, ids: &[u32]| {
            let mut distinct = CountDistinct::default();
            let values: ArrayRef = Arc::new(Float64Array::from(values));
            distinct.update(Some(&values), ids.len(), RowGroups { ids: Some(ids), count: 3 }).unwrap();
            distinct
        };
        let one = slice(vec![Some(1.0), Some(2.5), Some(1.0), None, Some(nan)], &[0, 0, 0, 1, 2]);
        let two = slice(vec![Some(2.5), Some(nan), None], &[0, 2, 1]);
        assert_eq!(one.finish().unwrap()[0].as_primitive::<types::Int64Type>().values(), &[2, 0, 1]);
        let mut combined = CountDistinct::default();
        for partial in [one, two] {
            combined.merge(&partial.state().unwrap(), RowGroups { ids: Some(&[0, 1, 2]), count: 3 }).unwrap();
        }
        assert_eq!(combined.finish().unwrap()[0].as_primitive::<types::Int64Type>().values(), &[2, 0, 1]);

        let mut texts = CountDistinct::default();
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), Some("b"), Some("a"), None]));
        texts.update(Some(&values), 4, all(1)).unwrap();
        let mut combined = CountDistinct::default();
        combined.merge(&texts.state().unwrap(), all(1)).unwrap();
        combined.merge(&texts.state().unwrap(), all(1)).unwrap();
        assert_eq!(combined.finish().unwrap()[0].as_primitive::<types::Int64Type>().values(), &[2]);
    }

    #[test]
    fn exact_sums_do_not_overflow() {
        let mut sum = ExactSum::new(0);
        let big: ArrayRef = Arc::new(Int64Array::from(vec![i64::MAX, i64::MAX, 1]));
        sum.update(Some(&big), 3, all(1)).unwrap();
        let state = sum.state().unwrap();
        let expected = i256::from_i128(i128::from(i64::MAX) * 2 + 1);
        assert_eq!(state[0].as_primitive::<types::Decimal256Type>().value(0), expected);
        let mut empty = ExactSum::new(0);
        empty.update(Some(&(Arc::new(Int64Array::from(vec![None::<i64>])) as ArrayRef)), 1, all(1)).unwrap();
        assert!(empty.state().unwrap()[0].is_null(0));
        // Sums beyond 128 bits, in one group of two; the other group's sum stays exact.
        let huge = i128::MAX / 2 + 1;
        let decimals: ArrayRef = Arc::new(
            arrow::array::Decimal128Array::from(vec![Some(huge), Some(7), Some(huge), Some(huge), None]).with_precision_and_scale(38, 2).unwrap(),
        );
        let mut sum = ExactSum::new(2);
        sum.update(Some(&decimals), 5, RowGroups { ids: Some(&[0, 1, 0, 0, 1]), count: 2 }).unwrap();
        let mut merged = ExactSum::new(2);
        merged.merge(&sum.state().unwrap(), RowGroups { ids: Some(&[1, 0]), count: 2 }).unwrap();
        merged.merge(&sum.state().unwrap(), RowGroups { ids: Some(&[1, 0]), count: 2 }).unwrap();
        let state = merged.state().unwrap();
        let sums = state[0].as_primitive::<types::Decimal256Type>();
        assert_eq!(sums.value(0), i256::from_i128(14));
        assert_eq!(sums.value(1), i256::from_i128(huge).wrapping_mul(i256::from_i128(6)));
    }

    /// Sums of values with a display scale each: each group's sum at the largest scale of the
    /// values it added (PostgreSQL's `numeric` sums), kept through partial states; an average
    /// hands its sum on at that scale.
    #[test]
    fn sums_keep_the_largest_display_scale() {
        use crate::read::expression::per_value_type;
        let values = |rows: &[Option<(i128, i8)>]| -> ArrayRef {
            let DataType::Struct(fields) = per_value_type(40, 4) else { panic!() };
            let numbers: Decimal256Array = rows.iter().map(|r| r.map(|(v, _)| i256::from_i128(v))).collect();
            let numbers = numbers.with_precision_and_scale(40, 4).unwrap();
            let nulls = numbers.nulls().cloned();
            let scales = Int8Array::from(rows.iter().map(|r| r.map_or(0, |(_, s)| s)).collect::<Vec<_>>());
            Arc::new(arrow::array::StructArray::new(fields, vec![Arc::new(numbers), Arc::new(scales)], nulls))
        };
        let input = values(&[Some((1_5000, 0)), Some((2_2500, 2)), None, Some((-1_0000, 0)), Some((3_0000, 0))]);
        let mut sum = ExactSum::for_input(Some(input.data_type()));
        sum.update(Some(&input), 5, RowGroups { ids: Some(&[0, 0, 1, 1, 2]), count: 4 }).unwrap();
        // A partial of another slice: group 2 gains a value of scale 3.
        let mut other = ExactSum::for_input(Some(input.data_type()));
        other.update(Some(&values(&[Some((1230, 3))])), 1, RowGroups { ids: Some(&[0]), count: 1 }).unwrap();
        let mut merged = ExactSum::for_input(Some(sum.state().unwrap()[0].data_type()));
        merged.merge(&sum.state().unwrap(), RowGroups { ids: Some(&[0, 1, 2, 3]), count: 4 }).unwrap();
        merged.merge(&other.state().unwrap(), RowGroups { ids: Some(&[2]), count: 4 }).unwrap();
        let result = merged.finish().unwrap();
        let texts: Vec<Option<&str>> = result[0].as_string::<i32>().iter().collect();
        assert_eq!(texts, [Some("3.75"), Some("-1"), Some("3.123"), None]);
        let mut average = ExactAverage::for_input(Some(input.data_type()));
        average.update(Some(&input), 5, RowGroups { ids: None, count: 1 }).unwrap();
        let result = average.finish().unwrap();
        assert_eq!((result[0].as_string::<i32>().value(0), result[1].as_primitive::<types::Int64Type>().value(0)), ("5.75", 4));
    }

    #[test]
    fn narrow_integers_sum_as_their_widened_values() {
        // Seeded values at the types' extremes, with NULLs, in one group and in three: the
        // sums of the columns as they are equal those of the same values cast to 64 bits.
        let mut seed = 0x853c_49e6_748f_ea9bu64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 16
        };
        let ids: Vec<u32> = (0..5000).map(|_| (next() % 3) as u32).collect();
        let values: Vec<Option<i64>> = (0..5000)
            .map(|_| match next() % 5 {
                0 => None,
                1 => Some(i64::from(i32::MAX)),
                2 => Some(i64::from(i32::MIN)),
                _ => Some(next() as i32 as i64),
            })
            .collect();
        let narrow: Vec<ArrayRef> = vec![
            Arc::new(arrow::array::Int32Array::from(values.iter().map(|v| v.map(|v| v as i32)).collect::<Vec<_>>())),
            Arc::new(arrow::array::Int16Array::from(values.iter().map(|v| v.map(|v| v as i16)).collect::<Vec<_>>())),
            Arc::new(arrow::array::UInt32Array::from(values.iter().map(|v| v.map(|v| v as u32)).collect::<Vec<_>>())),
            Arc::new(arrow::array::UInt8Array::from(values.iter().map(|v| v.map(|v| v as u8)).collect::<Vec<_>>())),
        ];
        for column in narrow {
            let wide = arrow::compute::cast(&column, &DataType::Int64).unwrap();
            for groups in [RowGroups { ids: None, count: 1 }, RowGroups { ids: Some(&ids), count: 3 }] {
                let sum_of = |input: &ArrayRef| {
                    let mut sum = ExactSum::new(0);
                    sum.update(Some(input), input.len(), groups).unwrap();
                    sum.state().unwrap()[0].as_primitive::<types::Decimal256Type>().values().to_vec()
                };
                assert_eq!(sum_of(&column), sum_of(&wide), "{}", column.data_type());
            }
        }
    }

    #[test]
    fn float_overflow_is_an_error_as_in_postgres() {
        let mut sum = FloatSum::new(Reading::Float8);
        let huge: ArrayRef = Arc::new(Float64Array::from(vec![f64::MAX, f64::MAX]));
        assert_eq!(sum.update(Some(&huge), 2, all(1)).unwrap_err().kind(), ErrorKind::OutOfRange);
        let mut with_infinity = FloatSum::new(Reading::Float8);
        let inf: ArrayRef = Arc::new(Float64Array::from(vec![f64::MAX, f64::INFINITY]));
        with_infinity.update(Some(&inf), 2, all(1)).unwrap();
        // The sum of squares overflows first in float8_accum.
        let mut average = FloatAverage::default();
        let large: ArrayRef = Arc::new(Float64Array::from(vec![1e200, -1e200]));
        assert_eq!(average.update(Some(&large), 2, all(1)).unwrap_err().kind(), ErrorKind::OutOfRange);
    }

    #[test]
    fn partial_averages_combine() {
        let values: Vec<f64> = (1..=10).map(f64::from).collect();
        let mut whole = FloatAverage::default();
        whole.update(Some(&(Arc::new(Float64Array::from(values.clone())) as ArrayRef)), 10, all(1)).unwrap();
        let mut combined = FloatAverage::default();
        for part in values.chunks(3) {
            let mut partial = FloatAverage::default();
            partial.update(Some(&(Arc::new(Float64Array::from(part.to_vec())) as ArrayRef)), part.len(), all(1)).unwrap();
            combined.merge(&partial.state().unwrap(), all(1)).unwrap();
        }
        let average = |a: &FloatAverage| a.finish().unwrap()[0].as_primitive::<types::Float64Type>().value(0);
        assert_eq!(average(&whole), 5.5);
        assert_eq!(average(&combined), 5.5);
    }

    #[test]
    fn masked_sums_add_the_valid_values_only() {
        // Few, many and no values masked, at lengths around whole words.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..200 {
            let len = [1, 63, 64, 65, 200, 1000][case % 6];
            let masked_in = [2, 10, 100][case % 3];
            let values: Vec<i32> = (0..len).map(|_| next(2_000_001) as i32 - 1_000_000).collect();
            let valid: Vec<bool> = (0..len).map(|_| next(masked_in) != 0).collect();
            let nulls = NullBuffer::from(valid.clone());
            let expected: i64 = values.iter().zip(&valid).filter(|(_, v)| **v).map(|(x, _)| i64::from(*x)).sum();
            assert_eq!(masked_sum(&values, &nulls), expected, "case {case}");
        }
    }
}
