//! The one merge routine (hudi-format.md §7.4) for snapshot reads, incremental reads and
//! compaction: record versions of one file slice, oldest first, reduced to one per key.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, StringArray, UInt64Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{concat, filter, interleave};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, ErrorKind, Result};
use crate::log::DeleteRecord;
use crate::ordering::{OrderingColumn, OrderingRef};
use crate::read::base_ordering::BaseOrdering;
use crate::read::schema::{NullColumns, COMMIT_TIME_COLUMN, RECORD_KEY_COLUMN};
use crate::table::MergeMode;
use crate::timeline::WritesInRange;

/// Record versions in the order they were written.
#[derive(Debug, Clone)]
pub enum MergeSource {
    /// The rows of the slice's base file, aligned to the table schema. Only the first source
    /// may be a base file; its rows are not merged with each other (as in Java's reader).
    Base(RecordBatch),
    /// A base file read without its ordering values (NULL in `rows`), with what gives them
    /// ([`BaseOrdering`]): the merge reads the values of the base rows that the later sources
    /// name by position. The later sources must all carry positions.
    BaseAtPositions { rows: RecordBatch, ordering: Arc<BaseOrdering> },
    /// Rows of a log data block, aligned to the table schema; with the base-file position of
    /// each row when the block carries positions for the base file
    /// ([`crate::log::positions`]).
    Data { rows: RecordBatch, positions: Option<Vec<u64>> },
    /// Deleted keys, with the instant that wrote them (and positions as for `Data`).
    Deletes { records: Vec<DeleteRecord>, instant: String, positions: Option<Vec<u64>> },
}

impl MergeSource {
    /// Log rows matched by key.
    pub fn rows(rows: RecordBatch) -> MergeSource {
        MergeSource::Data { rows, positions: None }
    }
}

/// What a merge assembles besides its rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct MergeOutput<'a> {
    /// Only these columns; the others are NULL columns from the `NullColumns` (`None`: all).
    pub columns: Option<(&'a HashSet<usize>, &'a NullColumns)>,
    /// Also [`Merged::base_positions`].
    pub base_positions: bool,
    /// Also [`Merged::outcome`].
    pub outcome: bool,
    /// The rows as [`Merged::standing`] (not copied) instead of [`Merged::rows`]: for a
    /// consumer that can skip rows by a mask (an aggregate). Not with `base_positions`, nor
    /// for partial updates (which take columns from several rows).
    pub unassembled: bool,
}

impl MergeOutput<'_> {
    /// Whether the rows go out as [`Merged::standing`] for these `winners`: asked, and no
    /// winner takes columns from other rows.
    fn takes_standing(&self, winners: &Winners) -> bool {
        self.unassembled && !self.base_positions && winners.overrides.is_empty()
    }
}

/// One version of a key, borrowing from the merged batches and delete records.
#[derive(Debug, Clone, Copy)]
struct Version<'a> {
    /// `(batch, row)` of the row, or `None` when the key is deleted.
    row: Option<(usize, usize)>,
    ordering: OrderingRef<'a>,
    /// The instant that wrote this version (tracked for change queries only).
    instant: Option<&'a str>,
    /// The delete record of a deleted key.
    deleted: Option<&'a DeleteRecord>,
}

/// The surviving version of a key and, for change queries, whether the key was alive before
/// the first version written inside the range.
#[derive(Debug)]
struct KeyState<'a> {
    winner: Version<'a>,
    alive_before_range: Option<bool>,
    /// Partial updates only: where each data column's value comes from, when not all from
    /// the winner.
    columns: Option<Vec<ColumnSource<'a>>>,
}

/// Meta fields come first in the merged schema; partial updates merge the columns after them.
const FIRST_DATA_COLUMN: usize = crate::read::schema::META_FIELDS.len();

/// How versions of one key replace each other.
#[derive(Debug, Clone, Copy)]
pub struct MergeRule {
    pub mode: MergeMode,
    /// Index of the ordering field in the merged schema.
    pub ordering_column: Option<usize>,
}

impl MergeRule {
    /// Whether `newer` replaces `existing`. Event-time ordering: the newer version wins unless
    /// the existing one has a strictly greater ordering value; a delete with Hudi's default
    /// ordering value deletes regardless. Commit-time ordering: the newer always wins.
    fn replaces(&self, existing: &Version, newer: &Version) -> bool {
        self.replaces_ordering(existing.ordering, newer.ordering, newer.row.is_none())
    }

    /// [`Self::replaces`] by the versions' ordering values, and whether the newer deletes.
    #[inline]
    fn replaces_ordering(&self, existing: OrderingRef, newer: OrderingRef, newer_deletes: bool) -> bool {
        match self.mode {
            MergeMode::CommitTimeOrdering | MergeMode::Custom => true,
            MergeMode::EventTimeOrdering | MergeMode::PartialUpdate => {
                (newer_deletes && newer.is_default()) || !existing.greater_than(newer)
            }
        }
    }

    /// The ordering field's column, when versions are compared by it (commit-time merges
    /// never read it).
    pub(crate) fn compared_ordering_column(&self) -> Option<usize> {
        match self.mode {
            MergeMode::CommitTimeOrdering | MergeMode::Custom => None,
            MergeMode::EventTimeOrdering | MergeMode::PartialUpdate => self.ordering_column,
        }
    }

    /// The state of a key after all its `versions`, in merge order; with a change range, also
    /// whether it was alive before the range: the fold of the versions written before it alone
    /// (in merge order an instant of the range may come before one that completed before the
    /// range started). `batches` hold the versions' rows (read by partial updates for NULLs).
    fn fold<'a>(
        &self,
        versions: impl IntoIterator<Item = Version<'a>>,
        batches: &[RecordBatch],
        change_range: Option<&WritesInRange>,
    ) -> Option<KeyState<'a>> {
        let mut state: Option<KeyState<'a>> = None;
        // Change reads: the winner among the versions written before the range, and whether
        // the range wrote any.
        let mut before_range: Option<Version<'a>> = None;
        let mut range_wrote = false;
        for version in versions {
            if let Some(range) = change_range {
                if version.instant.is_some_and(|i| range.contains(i)) {
                    range_wrote = true;
                } else if before_range.as_ref().is_none_or(|winner| self.replaces(winner, &version)) {
                    before_range = Some(version);
                }
            }
            match &mut state {
                Some(state) => {
                    let newer_wins = self.replaces(&state.winner, &version);
                    if self.mode == MergeMode::PartialUpdate && state.winner.row.is_some() && version.row.is_some() {
                        state.columns = Some(partial_update(batches, state.columns.take(), &state.winner, &version));
                    } else if newer_wins {
                        state.columns = None;
                    }
                    if newer_wins {
                        state.winner = version;
                    }
                }
                None => state = Some(KeyState { winner: version, alive_before_range: None, columns: None }),
            }
        }
        if let Some(state) = &mut state {
            state.alive_before_range = range_wrote.then(|| before_range.is_some_and(|winner| winner.row.is_some()));
        }
        state
    }
}

/// Where one column of a partially updated key comes from, and that version's ordering value.
#[derive(Debug, Clone, Copy)]
struct ColumnSource<'a> {
    row: (usize, usize),
    ordering: OrderingRef<'a>,
}

/// Partial update of one key's data columns (`sources`; all from `old` when `None`) by `new`:
/// each column keeps the non-NULL value with the greatest ordering value (ties: the newer),
/// whatever order the versions come in. A NULL never replaces a value.
fn partial_update<'a>(batches: &[RecordBatch], sources: Option<Vec<ColumnSource<'a>>>, old: &Version<'a>, new: &Version<'a>) -> Vec<ColumnSource<'a>> {
    let (Some(old_row), Some(new_row)) = (old.row, new.row) else { return sources.unwrap_or_default() };
    let data_columns = batches[new_row.0].num_columns().saturating_sub(FIRST_DATA_COLUMN);
    let mut sources =
        sources.unwrap_or_else(|| vec![ColumnSource { row: old_row, ordering: old.ordering }; data_columns]);
    for (i, source) in sources.iter_mut().enumerate() {
        let column = FIRST_DATA_COLUMN + i;
        let has_new = batches[new_row.0].column(column).is_valid(new_row.1);
        let has_current = batches[source.row.0].column(column).is_valid(source.row.1);
        if has_new && (!has_current || !source.ordering.greater_than(new.ordering)) {
            *source = ColumnSource { row: new_row, ordering: new.ordering };
        }
    }
    sources
}

/// What the merge of one file slice produced.
#[derive(Debug, Default)]
pub struct Merged {
    /// One row per surviving key: the base rows no log version touched, in the base file's
    /// order; then the winners of keys the base file has, in its order; then the winners of
    /// keys only the logs have, in key order (by position, past the base file, when merged by
    /// position).
    pub rows: Option<RecordBatch>,
    /// Change queries only: per row of `rows`, whether the key was alive before the range.
    pub alive_before_range: Vec<bool>,
    /// Change queries only: keys whose last version is a delete inside the range.
    pub deleted: Vec<DeletedKey>,
    /// When asked for: per row of `rows`, its position in the base file (`None` for keys
    /// only the logs have).
    pub base_positions: Option<UInt64Array>,
    /// When asked for, of a merge without a change range: what it decided, to assemble the
    /// rows of the same versions again ([`assemble`]).
    pub outcome: Option<Arc<MergeOutcome>>,
    /// With [`MergeOutput::unassembled`]: each batch the merge was given (all its columns)
    /// that has rows in the result, with the mask of those rows.
    pub standing: Vec<(RecordBatch, BooleanArray)>,
}

/// A key removed by a delete inside a change range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedKey {
    pub record_key: String,
    pub partition_path: Option<String>,
    pub instant: String,
    /// Whether the slice's versions show the key alive before the range (a key inserted and
    /// deleted inside the range was never seen by a reader of its start).
    pub alive_before_range: bool,
}

type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The columns of a source batch that merging reads.
struct MergeColumns<'a> {
    /// Record keys, without NULLs (checked once per batch); `None` when matching by position.
    keys: Option<&'a StringArray>,
    commit_times: &'a StringArray,
    ordering: Option<OrderingColumn<'a>>,
}

impl<'a> MergeColumns<'a> {
    fn of(batch: &'a RecordBatch, ordering_column: Option<usize>, by_key: bool) -> Result<MergeColumns<'a>> {
        let not_strings = || Error::new(ErrorKind::Internal, "meta columns are not string columns");
        let keys = if by_key {
            let keys = batch.column(RECORD_KEY_COLUMN).as_string_opt::<i32>().ok_or_else(not_strings)?;
            if keys.null_count() > 0 {
                return Err(Error::new(ErrorKind::Corrupt, "a record without _hoodie_record_key cannot be merged"));
            }
            Some(keys)
        } else {
            None
        };
        Ok(MergeColumns {
            keys,
            commit_times: batch.column(COMMIT_TIME_COLUMN).as_string_opt::<i32>().ok_or_else(not_strings)?,
            ordering: ordering_column.map(|c| OrderingColumn::of(batch.column(c).as_ref())),
        })
    }

    fn ordering(&self, row: usize) -> OrderingRef<'a> {
        self.ordering.as_ref().map_or(OrderingRef::Null, |c| c.get(row))
    }

    fn version(&self, batch: usize, row: usize, tracking: bool) -> Version<'a> {
        Version {
            row: Some((batch, row)),
            ordering: self.ordering(row),
            instant: (tracking && self.commit_times.is_valid(row)).then(|| self.commit_times.value(row)),
            deleted: None,
        }
    }
}

/// Where a version written after the base file is.
#[derive(Debug, Clone, Copy)]
enum LogEntry<'a> {
    Row { batch: usize, row: usize },
    Delete { record: &'a DeleteRecord, instant: &'a str },
}

impl<'a> LogEntry<'a> {
    /// The record key of this version (`None` for rows whose keys are not read: matching by
    /// position).
    fn record_key(self, columns: &[MergeColumns<'a>]) -> Option<&'a str> {
        match self {
            LogEntry::Row { batch, row } => columns[batch].keys.map(|keys| keys.value(row)),
            LogEntry::Delete { record, .. } => Some(&record.record_key),
        }
    }

    fn version(self, columns: &[MergeColumns<'a>], tracking: bool) -> Version<'a> {
        match self {
            LogEntry::Row { batch, row } => columns[batch].version(batch, row, tracking),
            LogEntry::Delete { record, instant } => Version {
                row: None,
                ordering: record.ordering.as_ref(),
                instant: Some(instant),
                deleted: Some(record),
            },
        }
    }
}

/// The versions written after the base file, grouped by what identifies their record (the
/// record key, or the base-file position): in sorted order, each group's versions in the order
/// they were written (the sort is stable). Sorted groups let a sorted base file be matched by
/// one walk.
struct LogIndex<'a, K> {
    entries: Vec<(K, LogEntry<'a>)>,
    /// Where each group's run of versions starts in `entries`, then `entries.len()`.
    starts: Vec<usize>,
}

impl<'a, K: Ord + Copy> LogIndex<'a, K> {
    fn new(mut entries: Vec<(K, LogEntry<'a>)>) -> LogIndex<'a, K> {
        // One block's positions come sorted: a stable sort would still copy them once.
        if !entries.is_sorted_by(|a, b| a.0 <= b.0) {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let mut starts: Vec<usize> = (0..entries.len()).filter(|&i| i == 0 || entries[i].0 != entries[i - 1].0).collect();
        starts.push(entries.len());
        LogIndex { entries, starts }
    }

    /// The number of groups.
    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn key(&self, group: usize) -> K {
        self.entries[self.starts[group]].0
    }

    fn entries(&self, group: usize) -> impl Iterator<Item = LogEntry<'a>> + '_ {
        self.entries[self.starts[group]..self.starts[group + 1]].iter().map(|e| e.1)
    }
}

impl LogIndex<'_, u64> {
    /// `(base row, group)` for each group whose position is a row of a base file of
    /// `base_rows` rows, in base order. A position past the end matches nothing: its versions
    /// stand alone, as keys only the logs have.
    fn match_positions(&self, base_rows: usize) -> Vec<(usize, usize)> {
        (0..self.len())
            .map(|group| (self.key(group), group))
            .take_while(|&(position, _)| position < base_rows as u64)
            .map(|(position, group)| (position as usize, group))
            .collect()
    }
}

impl<'a> LogIndex<'a, &'a str> {
    /// `(base row, key group)` for each base row whose key the logs have versions of, in
    /// base order. A key that occurs in several base rows matches the first only: base rows
    /// are not merged with each other (as in Java's reader).
    fn match_base(&self, keys: &StringArray) -> Vec<(usize, usize)> {
        if let Some(matches) = self.match_sorted_base(keys) {
            return matches;
        }
        let mut groups: FastMap<&str, usize> = FastMap::with_capacity_and_hasher(self.len(), Default::default());
        groups.extend((0..self.len()).map(|g| (self.key(g), g)));
        let mut matches = Vec::with_capacity(self.len());
        for row in 0..keys.len() {
            if let Some(group) = groups.remove(keys.value(row)) {
                matches.push((row, group));
                if groups.is_empty() {
                    break;
                }
            }
        }
        matches
    }

    /// [`Self::match_base`] by one walk over base keys in sorted order (as compaction writes
    /// them); `None` when the base keys turn out not to be sorted.
    ///
    /// Only a log key that the walk passed over can be missed, and only if a later base row
    /// has a smaller key than the one it was passed over at: so rows are checked for order
    /// only after the first pass-over (none when every log key updates a base row).
    fn match_sorted_base(&self, keys: &StringArray) -> Option<Vec<(usize, usize)>> {
        let rows = keys.len();
        let mut matches = Vec::with_capacity(self.len());
        if self.len() == 0 {
            return Some(matches);
        }
        // The greatest base key at which a log key was passed over.
        let mut passed_at: Option<&str> = None;
        let mut group = 0;
        for row in 0..rows {
            let key = keys.value(row);
            if passed_at.is_some_and(|passed| key < passed) {
                return None;
            }
            // One comparison per row unless log keys are passed over.
            let mut order = self.key(group).cmp(key);
            while order == std::cmp::Ordering::Less {
                passed_at = Some(passed_at.map_or(key, |p| p.max(key)));
                group += 1;
                if group == self.len() {
                    break;
                }
                order = self.key(group).cmp(key);
            }
            if order == std::cmp::Ordering::Equal {
                matches.push((row, group));
                group += 1;
            }
            if group == self.len() {
                // Every log key is behind: the rest of the base stands, unless a passed-over
                // key comes again (then the base is not sorted).
                let unsorted = passed_at.is_some_and(|passed| (row + 1..rows).any(|r| keys.value(r) < passed));
                return (!unsorted).then_some(matches);
            }
        }
        Some(matches)
    }
}

/// The rows that won a merge against other versions, by `(batch, row)`, with the base-file
/// row each replaced, if any; partial updates take some columns from other rows:
/// `(position in rows, column, (batch, row))`.
#[derive(Debug, Default)]
struct Winners {
    rows: Vec<(usize, usize)>,
    base_rows: Vec<Option<u64>>,
    overrides: Vec<(usize, usize, (usize, usize))>,
}

/// Records the outcome of one key (at `base_row` of the base file, if there): its surviving
/// row, or, in a change range, its deletion.
fn emit(merged: &mut Merged, winners: &mut Winners, base_row: Option<usize>, state: Option<KeyState>, change_range: Option<&WritesInRange>) {
    let Some(state) = state else { return };
    match state.winner.row {
        Some(row) => {
            for (i, source) in state.columns.iter().flatten().enumerate() {
                if source.row != row {
                    winners.overrides.push((winners.rows.len(), FIRST_DATA_COLUMN + i, source.row));
                }
            }
            winners.rows.push(row);
            winners.base_rows.push(base_row.map(|r| r as u64));
            if change_range.is_some() {
                merged.alive_before_range.push(state.alive_before_range.unwrap_or(false));
            }
        }
        None => {
            let instant = state.winner.instant.unwrap_or_default();
            if let (true, Some(record)) = (change_range.is_some_and(|r| r.contains(instant)), state.winner.deleted) {
                merged.deleted.push(DeletedKey {
                    record_key: record.record_key.clone(),
                    partition_path: record.partition_path.clone(),
                    instant: instant.to_owned(),
                    alive_before_range: state.alive_before_range == Some(true),
                });
            }
        }
    }
}

/// A source written after the base file: a data block (its index in the batches, and its
/// number of rows) or the records of a delete block and the instant that wrote them.
enum Later {
    Rows { batch: usize, rows: usize },
    Deletes(Vec<DeleteRecord>, String),
}

impl Later {
    /// Its versions, in the order written.
    fn entries(&self) -> impl Iterator<Item = LogEntry<'_>> + '_ {
        let (rows, deletes) = match self {
            &Later::Rows { batch, rows } => (Some((batch, rows)), None),
            Later::Deletes(records, instant) => (None, Some((records, instant.as_str()))),
        };
        let rows = rows.into_iter().flat_map(|(batch, rows)| (0..rows).map(move |row| LogEntry::Row { batch, row }));
        let deletes = deletes.into_iter().flat_map(|(records, instant)| records.iter().map(move |record| LogEntry::Delete { record, instant }));
        rows.chain(deletes)
    }
}

/// Merges the versions of one file slice into one row per surviving key, assembling what
/// `output` asks for. With `change_range` (the requested instants of the commits in an
/// incremental range) the merge also records, per key, whether it was alive before the first
/// version written in the range, and which keys the range deleted.
///
/// The log versions are grouped (borrowed, not copied) and matched against the base file's
/// rows: by position when every log source carries base-file positions (then the base file's
/// keys are not read), otherwise by record key. Only rows that the logs touch are compared by
/// ordering value; untouched base rows are kept by a mask.
pub fn merge(
    schema: &SchemaRef,
    sources: Vec<MergeSource>,
    rule: MergeRule,
    change_range: Option<&WritesInRange>,
    output: MergeOutput,
) -> Result<Merged> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut has_base = false;
    let mut base_ordering = None;
    let mut later: Vec<(Later, Option<Vec<u64>>)> = Vec::new();
    for (i, source) in sources.into_iter().enumerate() {
        match source {
            MergeSource::Base(batch) if i == 0 => {
                has_base = true;
                batches.push(batch);
            }
            MergeSource::BaseAtPositions { rows, ordering } if i == 0 => {
                has_base = true;
                batches.push(rows);
                base_ordering = Some(ordering);
            }
            MergeSource::Base(_) | MergeSource::BaseAtPositions { .. } => {
                return Err(Error::new(ErrorKind::Internal, "a base file after other versions"))
            }
            MergeSource::Data { rows, positions } => {
                check_positions(positions.as_deref(), rows.num_rows())?;
                later.push((Later::Rows { batch: batches.len(), rows: rows.num_rows() }, positions));
                batches.push(rows);
            }
            MergeSource::Deletes { records, instant, positions } => {
                check_positions(positions.as_deref(), records.len())?;
                later.push((Later::Deletes(records, instant), positions));
            }
        }
    }
    let by_position = has_base && !later.is_empty() && later.iter().all(|(_, positions)| positions.is_some());
    let columns = batches
        .iter()
        .map(|b| MergeColumns::of(b, rule.compared_ordering_column(), !by_position))
        .collect::<Result<Vec<_>>>()?;
    let base_rows = if has_base { batches[0].num_rows() } else { 0 };
    // Versions written after the base file, grouped by base-file position or by key.
    let by_positions = by_position.then(|| {
        let entries = later.iter().flat_map(|(source, positions)| positions.iter().flatten().copied().zip(source.entries()));
        let log = LogIndex::new(entries.collect());
        let matches = log.match_positions(base_rows);
        (log, matches)
    });
    // The ordering values of the matched base rows, when the base file came without them.
    let base_ordering = match (base_ordering, &by_positions) {
        (Some(chunks), Some((_, matches))) => Some(chunks.values_at(&matches.iter().map(|&(row, _)| row as u64).collect::<Vec<_>>())?),
        (Some(_), None) if !later.is_empty() => {
            return Err(Error::new(ErrorKind::Internal, "a base file without ordering values for versions without positions"))
        }
        _ => None,
    };
    let base_ordering = base_ordering.as_ref().map(|values| OrderingColumn::of(values.as_ref()));
    let input = MergeInput { schema, batches: &batches, columns: &columns, base_ordering, has_base, rule, change_range, output };
    if let Some((log, matches)) = &by_positions {
        return input.finish(log, matches);
    }
    let entries = later.iter().flat_map(|(source, _)| source.entries()).map(|entry| {
        let key = entry.record_key(&columns).ok_or_else(|| Error::new(ErrorKind::Internal, "log rows without keys"))?;
        Ok((key, entry))
    });
    let log = LogIndex::new(entries.collect::<Result<Vec<_>>>()?);
    let matches = match columns.first().and_then(|c| c.keys) {
        Some(base_keys) if has_base && log.len() > 0 => log.match_base(base_keys),
        _ => Vec::new(),
    };
    input.finish(&log, &matches)
}

/// A source's positions must name one row per record.
fn check_positions(positions: Option<&[u64]>, records: usize) -> Result<()> {
    match positions {
        Some(positions) if positions.len() != records => Err(Error::new(
            ErrorKind::Corrupt,
            format!("a log block has {} record positions for {records} records", positions.len()),
        )),
        _ => Ok(()),
    }
}

/// The batches and rules of one merge, once its log versions are grouped.
struct MergeInput<'i, 'a> {
    schema: &'i SchemaRef,
    /// The base file's rows first (when `has_base`), then those of each data block.
    batches: &'a [RecordBatch],
    columns: &'i [MergeColumns<'a>],
    /// With [`MergeSource::BaseAtPositions`]: the ordering value of each matched base row, in
    /// the order of the matches (position order).
    base_ordering: Option<OrderingColumn<'a>>,
    has_base: bool,
    rule: MergeRule,
    change_range: Option<&'i WritesInRange>,
    output: MergeOutput<'i>,
}

impl<'a> MergeInput<'_, 'a> {
    /// Folds the versions of each group, starting from its base row in `matches` (`(base
    /// row, group)`, in base order), and assembles the rows.
    fn finish<K: Ord + Copy>(&self, log: &LogIndex<'a, K>, matches: &[(usize, usize)]) -> Result<Merged> {
        let (mut merged, kept, winners) = self.resolve(log, matches);
        if self.change_range.is_some() {
            let mut alive = vec![false; kept.count_set_bits()];
            alive.append(&mut merged.alive_before_range);
            merged.alive_before_range = alive;
        }
        let batch_rows = self.batches.iter().map(RecordBatch::num_rows).collect();
        let outcome = MergeOutcome { kept, winners, batch_rows, masks: OnceLock::new() };
        outcome.assemble_into(&mut merged, self.schema, self.batches, self.output)?;
        if self.output.outcome && self.change_range.is_none() {
            merged.outcome = Some(Arc::new(outcome));
        }
        Ok(merged)
    }

    /// Decides each key's outcome: the base rows that stand (a bit per base row), the winning
    /// rows of the other keys, and, in a change range, the keys' state before it and the keys
    /// it deleted (in the returned `Merged`).
    fn resolve<K: Ord + Copy>(&self, log: &LogIndex<'a, K>, matches: &[(usize, usize)]) -> (Merged, BooleanBuffer, Winners) {
        let (batches, columns, rule, change_range) = (self.batches, self.columns, self.rule, self.change_range);
        let tracking = change_range.is_some();
        let mut merged = Merged::default();
        let base_rows = if self.has_base { batches[0].num_rows() } else { 0 };
        // Base rows that stand are kept by a mask (cheap to apply); the other winners by position.
        let mut keep_base = BooleanBufferBuilder::new(base_rows);
        let mut matched_groups = vec![false; log.len()];
        let mut winners = Winners { rows: Vec::with_capacity(log.len()), ..Default::default() };
        // Without change tracking or partial updates, a key's outcome is its winning row alone:
        // found by comparing ordering values, without the rest of the versions' state.
        let winner_alone = !tracking && rule.mode != MergeMode::PartialUpdate;
        for (i, &(row, group)) in matches.iter().enumerate() {
            keep_base.append_n(row - keep_base.len(), true);
            keep_base.append(false);
            matched_groups[group] = true;
            let base_ordering = match &self.base_ordering {
                Some(values) => values.get(i),
                None => columns[0].ordering(row),
            };
            if winner_alone {
                if let Some(winner) = self.winning_row(row, base_ordering, log.entries(group)) {
                    winners.rows.push(winner);
                    winners.base_rows.push(Some(row as u64));
                }
                continue;
            }
            let base = Version { ordering: base_ordering, ..columns[0].version(0, row, tracking) };
            let versions = std::iter::once(base).chain(log.entries(group).map(|e| e.version(columns, tracking)));
            let state = rule.fold(versions, batches, change_range);
            emit(&mut merged, &mut winners, Some(row), state, change_range);
        }
        // Untouched by the logs, the other base rows stand (and, in a change range, their keys
        // were not alive before their one version).
        keep_base.append_n(base_rows - keep_base.len(), true);
        for group in (0..log.len()).filter(|&g| !matched_groups[g]) {
            let state = rule.fold(log.entries(group).map(|e| e.version(columns, tracking)), batches, change_range);
            emit(&mut merged, &mut winners, None, state, change_range);
        }
        (merged, keep_base.finish(), winners)
    }

    /// The row of a key that survives its base row `base_row` (of ordering value
    /// `base_ordering`) and its `later` versions (in merge order); `None` when a delete wins.
    fn winning_row(&self, base_row: usize, base_ordering: OrderingRef<'a>, later: impl Iterator<Item = LogEntry<'a>>) -> Option<(usize, usize)> {
        let mut winner = (Some((0, base_row)), base_ordering);
        for entry in later {
            let newer = match entry {
                LogEntry::Row { batch, row } => (Some((batch, row)), self.columns[batch].ordering(row)),
                LogEntry::Delete { record, .. } => (None, record.ordering.as_ref()),
            };
            if self.rule.replaces_ordering(winner.1, newer.1, newer.0.is_none()) {
                winner = newer;
            }
        }
        winner.0
    }
}

/// What a merge decided, row by row, without the values: the base rows that stand and the
/// winning rows of the other keys (of a merge without a change range). It depends on the
/// slice's versions and the merge rule only, not on the columns read, so that a later read
/// of the same slice may assemble any of its columns by it without merging again
/// ([`assemble`], kept per process by [`crate::read::merge_cache`]).
#[derive(Debug)]
pub struct MergeOutcome {
    /// A bit per base row: whether it stands.
    kept: BooleanBuffer,
    winners: Winners,
    /// The rows of each batch it was decided for: the base file's first, then the data blocks'.
    batch_rows: Vec<usize>,
    /// Each batch's mask of the rows that stand (`None` for a batch without any), made once,
    /// when the rows are first taken by masks ([`MergeOutput::unassembled`]).
    masks: OnceLock<Vec<Option<BooleanArray>>>,
}

impl MergeOutcome {
    /// The bytes it holds.
    pub fn size(&self) -> usize {
        let winners = &self.winners;
        std::mem::size_of::<Self>()
            + self.kept.inner().capacity()
            + winners.rows.capacity() * std::mem::size_of::<(usize, usize)>()
            + winners.base_rows.capacity() * std::mem::size_of::<Option<u64>>()
            + winners.overrides.capacity() * std::mem::size_of::<(usize, usize, (usize, usize))>()
            + self.batch_rows.capacity() * std::mem::size_of::<usize>()
            // The masks, a bit per row: counted before they are made, at the first reuse.
            + self.batch_rows.iter().map(|rows| rows.div_ceil(8)).sum::<usize>()
    }

    /// Sets `merged.rows` (and `base_positions`, when `output` asks) to the kept base rows of
    /// `batches[0]` followed by the winners; or, [`MergeOutput::unassembled`], `merged.standing`:
    /// each batch with rows in the result, with its mask of them.
    fn assemble_into(&self, merged: &mut Merged, schema: &SchemaRef, batches: &[RecordBatch], output: MergeOutput) -> Result<()> {
        if output.takes_standing(&self.winners) {
            // The masks depend on the outcome alone: made once, then only paired.
            let masks = self.masks.get_or_init(|| standing_masks(&self.batch_rows, &self.kept, &self.winners));
            merged.standing = batches
                .iter()
                .zip(masks)
                .filter_map(|(batch, mask)| Some((batch, mask.clone()?)))
                .map(|(batch, mask)| Ok((output_columns(batch, output)?, mask)))
                .collect::<Result<_>>()?;
            return Ok(());
        }
        assemble_rows(merged, schema, batches, &BooleanArray::new(self.kept.clone(), None), &self.winners, output)
    }
}

/// `batch` with the columns `output` does not ask for as NULL columns: the merge read the
/// record keys and ordering values of every row, which a consumer of the standing rows would
/// otherwise filter and copy with the rest.
fn output_columns(batch: &RecordBatch, output: MergeOutput) -> Result<RecordBatch> {
    let Some((columns, nulls)) = output.columns else { return Ok(batch.clone()) };
    let schema = batch.schema();
    let projected = (0..schema.fields().len())
        .map(|c| if columns.contains(&c) { batch.column(c).clone() } else { nulls.get(schema.field(c).data_type(), batch.num_rows()) })
        .collect();
    RecordBatch::try_new(schema.clone(), projected).map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble merged rows").with_source(e))
}

/// For each of the merged batches (of `batch_rows` rows), the mask of its rows in the result
/// (`None` when it has none): the `kept` base rows of the first (when it is the base file's)
/// and the winners.
fn standing_masks(batch_rows: &[usize], kept: &BooleanBuffer, winners: &Winners) -> Vec<Option<BooleanArray>> {
    let mut masks: Vec<Option<BooleanBufferBuilder>> = batch_rows.iter().map(|_| None).collect();
    if kept.count_set_bits() > 0 {
        let mut base = BooleanBufferBuilder::new(kept.len());
        base.append_buffer(kept);
        masks[0] = Some(base);
    }
    for &(batch, row) in &winners.rows {
        let rows = batch_rows[batch];
        masks[batch]
            .get_or_insert_with(|| {
                let mut none = BooleanBufferBuilder::new(rows);
                none.append_n(rows, false);
                none
            })
            .set_bit(row, true);
    }
    masks.into_iter().map(|mask| Some(BooleanArray::new(mask?.finish(), None))).collect()
}

/// The rows a merge decided (`outcome`) assembled from `batches`: the base file's rows first
/// when the merge had a base file, then the rows of each data block, in the order the merge
/// was given them (delete blocks have no rows). The batches may hold other columns than the
/// merge read, but must have the same rows.
pub fn assemble(schema: &SchemaRef, batches: &[RecordBatch], outcome: &MergeOutcome, output: MergeOutput) -> Result<Merged> {
    if !batches.iter().map(RecordBatch::num_rows).eq(outcome.batch_rows.iter().copied()) {
        return Err(Error::new(ErrorKind::Internal, "a merge outcome does not fit the rows it is applied to"));
    }
    let mut merged = Merged::default();
    outcome.assemble_into(&mut merged, schema, batches, output)?;
    Ok(merged)
}

/// Sets `merged.rows` (and `base_positions`, when `output` asks) to the `kept` base rows of
/// `batches[0]` followed by the winners, copied.
fn assemble_rows(merged: &mut Merged, schema: &SchemaRef, batches: &[RecordBatch], kept: &BooleanArray, winners: &Winners, output: MergeOutput) -> Result<()> {
    let kept_rows = kept.true_count();
    if output.base_positions {
        let kept_positions = kept.values().set_indices().map(|r| Some(r as u64));
        merged.base_positions = Some(kept_positions.chain(winners.base_rows.iter().copied()).collect());
    }
    let rows = kept_rows + winners.rows.len();
    if rows == 0 {
        return Ok(());
    }
    let assemble = |e| Error::new(ErrorKind::Internal, "cannot assemble merged rows").with_source(e);
    let columns = (0..schema.fields().len())
        .map(|c| {
            if let Some((_, nulls)) = output.columns.filter(|(columns, _)| !columns.contains(&c)) {
                return Ok(nulls.get(schema.field(c).data_type(), rows));
            }
            let mut parts: Vec<ArrayRef> = Vec::with_capacity(2);
            if kept_rows > 0 {
                let base = batches[0].column(c);
                parts.push(if kept_rows == base.len() { base.clone() } else { filter(base, kept).map_err(assemble)? });
            }
            if !winners.rows.is_empty() {
                let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
                let mut overrides = winners.overrides.iter().filter(|o| o.1 == c).peekable();
                let indices = if overrides.peek().is_some() {
                    let mut indices = winners.rows.clone();
                    overrides.for_each(|&(position, _, source)| indices[position] = source);
                    std::borrow::Cow::Owned(indices)
                } else {
                    std::borrow::Cow::Borrowed(&winners.rows)
                };
                parts.push(interleave(&arrays, &indices).map_err(assemble)?);
            }
            match parts.len() {
                1 => Ok(parts.pop().expect("one part")),
                _ => concat(&parts.iter().map(|p| p.as_ref()).collect::<Vec<_>>()).map_err(assemble),
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    merged.rows = Some(RecordBatch::try_new(schema.clone(), columns).map_err(assemble)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ordering::OrderingValue;
    use crate::read::schema::table_schema;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        let data = Schema::new(vec![Field::new("ts", DataType::Int64, true), Field::new("v", DataType::Utf8, true)]);
        table_schema(&data, true)
    }

    fn rows(schema: &SchemaRef, data: &[(&str, i64, &str)]) -> MergeSource {
        rows_at(schema, None, data)
    }

    fn rows_at(schema: &SchemaRef, instant: Option<&str>, data: &[(&str, i64, &str)]) -> MergeSource {
        let nulls = || Arc::new(StringArray::from(vec![None::<&str>; data.len()])) as Arc<dyn Array>;
        let commit_time = Arc::new(StringArray::from(vec![instant; data.len()])) as Arc<dyn Array>;
        let keys = StringArray::from(data.iter().map(|r| r.0).collect::<Vec<_>>());
        let ts = Int64Array::from(data.iter().map(|r| r.1).collect::<Vec<_>>());
        let v = StringArray::from(data.iter().map(|r| r.2).collect::<Vec<_>>());
        MergeSource::rows(
            RecordBatch::try_new(
                schema.clone(),
                vec![commit_time, nulls(), Arc::new(keys), nulls(), nulls(), Arc::new(ts), Arc::new(v)],
            )
            .unwrap(),
        )
    }

    fn delete(key: &str, ordering: OrderingValue) -> MergeSource {
        MergeSource::Deletes {
            records: vec![DeleteRecord { record_key: key.into(), partition_path: None, ordering }],
            instant: "1".into(),
            positions: None,
        }
    }

    fn result(merged: Merged) -> Vec<(String, String)> {
        let Some(batch) = merged.rows else { return vec![] };
        let keys = batch.column(2).as_string::<i32>();
        let v = batch.column(6).as_string::<i32>();
        let mut out: Vec<(String, String)> = (0..batch.num_rows()).map(|i| (keys.value(i).to_owned(), v.value(i).to_owned())).collect();
        out.sort();
        out
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The merge of `sources` without a change range, all columns assembled.
    fn merge_versions(s: &SchemaRef, sources: Vec<MergeSource>, rule: MergeRule) -> Merged {
        merge(s, sources, rule, None, MergeOutput::default()).unwrap()
    }

    const EVENT: MergeRule = MergeRule { mode: MergeMode::EventTimeOrdering, ordering_column: Some(5) };

    #[test]
    fn event_time_keeps_greater_ordering_and_newer_on_ties() {
        let s = schema();
        let merged = merge_versions(
            &s,
            vec![
                rows(&s, &[("a", 10, "a-base"), ("b", 10, "b-base"), ("c", 10, "c-base")]),
                rows(&s, &[("a", 5, "a-older-event"), ("b", 10, "b-tie"), ("c", 11, "c-newer"), ("d", 1, "d-new")]),
            ],
            EVENT,
        );
        assert_eq!(
            result(merged),
            pairs(&[("a", "a-base"), ("b", "b-tie"), ("c", "c-newer"), ("d", "d-new")])
        );
    }

    #[test]
    fn base_rows_stand_unless_the_logs_touch_their_keys() {
        let s = schema();
        let MergeSource::Data { rows: base, .. } = rows(&s, &[("a", 10, "a-base"), ("b", 10, "b-base"), ("c", 10, "c-base")]) else { unreachable!() };
        let merged = merge_versions(
            &s,
            vec![
                MergeSource::Base(base),
                rows(&s, &[("d", 1, "d-new"), ("b", 11, "b-newer"), ("c", 9, "c-older")]),
                delete("a", OrderingValue::Int(0)),
            ],
            EVENT,
        );
        assert_eq!(
            result(merged),
            pairs(&[("b", "b-newer"), ("c", "c-base"), ("d", "d-new")])
        );
    }

    #[test]
    fn sorted_and_unsorted_base_files_find_the_same_log_keys() {
        let s = schema();
        for base_keys in [["a", "c", "e", "g"], ["c", "a", "g", "e"], ["a", "c", "g", "e"]] {
            let base: Vec<(&str, i64, &str)> = base_keys.iter().map(|k| (*k, 10, "base")).collect();
            let MergeSource::Data { rows: base, .. } = rows(&s, &base) else { unreachable!() };
            let merged = merge_versions(
                &s,
                vec![
                    MergeSource::Base(base),
                    rows(&s, &[("b", 1, "new"), ("c", 11, "log"), ("e", 11, "log"), ("h", 1, "new")]),
                    delete("g", OrderingValue::Int(0)),
                ],
                EVENT,
            );
            assert_eq!(
                result(merged),
                pairs(&[("a", "base"), ("b", "new"), ("c", "log"), ("e", "log"), ("h", "new")]),
                "base keys in the order {base_keys:?}"
            );
        }
    }

    #[test]
    fn an_unsorted_base_is_noticed_after_the_walk_passed_every_log_key() {
        let s = schema();
        let MergeSource::Data { rows: base, .. } = rows(&s, &[("z", 10, "base"), ("a", 10, "base")]) else { unreachable!() };
        let merged = merge_versions(&s, vec![MergeSource::Base(base), rows(&s, &[("a", 11, "log")])], EVENT);
        assert_eq!(result(merged), pairs(&[("a", "log"), ("z", "base")]));
    }

    #[test]
    fn matching_finds_the_first_base_row_of_every_log_key_in_any_order() {
        // Pseudo-random bases (sorted or shuffled, with duplicates) and log key sets, against
        // the definition: each log key meets the first base row with its key.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..500 {
            let mut base: Vec<String> = (0..next(12)).map(|_| format!("k{}", next(15))).collect();
            if case % 2 == 0 {
                base.sort();
            }
            let mut log: Vec<String> = (0..next(8)).map(|_| format!("k{}", next(15))).collect();
            log.sort();
            log.dedup();
            let log_index = LogIndex::new(log.iter().map(|k| (k.as_str(), LogEntry::Row { batch: 1, row: 0 })).collect());
            let base_keys = StringArray::from(base.clone());
            let mut got = log_index.match_base(&base_keys);
            got.sort();
            let mut expected: Vec<(usize, usize)> = log
                .iter()
                .enumerate()
                .filter_map(|(group, key)| base.iter().position(|b| b == key).map(|row| (row, group)))
                .collect();
            expected.sort();
            assert_eq!(got, expected, "base {base:?}, log {log:?}");
        }
    }

    #[test]
    fn winners_found_alone_are_the_winners_of_the_full_fold() {
        // Pseudo-random bases and blocks of upserts and deletes (default, lower, equal and
        // higher ordering values): merged without a change range (each key's winner found by
        // its ordering values alone) and with an empty one (every version folded with its
        // state), the rows agree, for event-time and commit-time ordering.
        let s = schema();
        let mut seed = 0x5851_f42d_4c95_7f2du64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let nothing_in_range: WritesInRange = std::iter::empty::<String>().collect();
        for case in 0..300 {
            let keys: Vec<String> = (0..1 + next(12)).map(|i| format!("k{i:02}")).collect();
            let base: Vec<(&str, i64, &str)> = keys.iter().map(|k| (k.as_str(), next(20) as i64, "base")).collect();
            let MergeSource::Data { rows: base, .. } = rows(&s, &base) else { unreachable!() };
            let mut sources = vec![MergeSource::Base(base)];
            for block in 0..1 + next(4) {
                let chosen: Vec<&String> = keys.iter().filter(|_| next(2) == 0).collect();
                if next(3) == 0 {
                    let records = chosen
                        .iter()
                        .map(|k| DeleteRecord { record_key: (*k).clone(), partition_path: None, ordering: OrderingValue::Int(next(25) as i64) })
                        .collect();
                    sources.push(MergeSource::Deletes { records, instant: "1".into(), positions: None });
                } else {
                    let value = format!("v{block}");
                    let data: Vec<(&str, i64, &str)> = chosen.iter().map(|k| (k.as_str(), next(25) as i64, value.as_str())).collect();
                    let MergeSource::Data { rows: block_rows, .. } = rows(&s, &data) else { unreachable!() };
                    sources.push(MergeSource::rows(block_rows));
                }
            }
            for mode in [MergeMode::EventTimeOrdering, MergeMode::CommitTimeOrdering] {
                let rule = MergeRule { mode, ordering_column: Some(5) };
                let copy = || sources.clone();
                let alone = merge(&s, copy(), rule, None, MergeOutput::default()).unwrap();
                let folded = merge(&s, copy(), rule, Some(&nothing_in_range), MergeOutput::default()).unwrap();
                assert_eq!(result(alone), result(folded), "case {case}, {mode:?}");
            }
        }
    }

    #[test]
    fn matching_by_position_merges_as_matching_by_key() {
        // Pseudo-random bases (any key order) and blocks of updates and deletes of base rows,
        // each block in position order: merged by position (the keys of the base left NULL)
        // and by key, the rows and their base positions agree.
        let s = schema();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..300 {
            let base_len = 1 + next(20) as usize;
            let mut base_keys: Vec<String> = (0..base_len).map(|i| format!("k{i:02}")).collect();
            if case % 2 == 1 {
                base_keys.reverse();
            }
            let base: Vec<(&str, i64, &str)> = base_keys.iter().map(|k| (k.as_str(), 10, "base")).collect();
            let MergeSource::Data { rows: base, .. } = rows(&s, &base) else { unreachable!() };
            let mut keyed = vec![MergeSource::Base(base.clone())];
            let mut positioned = vec![MergeSource::Base(without_keys(&base))];
            for block in 0..1 + next(4) {
                let rows_at: Vec<usize> = (0..base_len).filter(|_| next(3) == 0).collect();
                let positions: Vec<u64> = rows_at.iter().map(|&r| r as u64).collect();
                if block % 3 == 2 {
                    let records: Vec<DeleteRecord> = rows_at
                        .iter()
                        .map(|&r| DeleteRecord { record_key: base_keys[r].clone(), partition_path: None, ordering: OrderingValue::Int(next(3) as i64 * 10) })
                        .collect();
                    keyed.push(MergeSource::Deletes { records: records.clone(), instant: "1".into(), positions: None });
                    positioned.push(MergeSource::Deletes { records, instant: "1".into(), positions: Some(positions) });
                } else {
                    let values: Vec<String> = rows_at.iter().map(|r| format!("v{block}-{r}")).collect();
                    let data: Vec<(&str, i64, &str)> =
                        rows_at.iter().zip(&values).map(|(&r, v)| (base_keys[r].as_str(), 5 + next(10) as i64, v.as_str())).collect();
                    let MergeSource::Data { rows: block_rows, .. } = rows(&s, &data) else { unreachable!() };
                    keyed.push(MergeSource::rows(block_rows.clone()));
                    positioned.push(MergeSource::Data { rows: block_rows, positions: Some(positions) });
                }
            }
            let with_positions = MergeOutput { base_positions: true, ..Default::default() };
            let by_key = merge(&s, keyed, EVENT, None, with_positions).unwrap();
            let by_position = merge(&s, positioned, EVENT, None, with_positions).unwrap();
            let positions_of = |merged: &Merged| -> Vec<Option<u64>> { merged.base_positions.as_ref().unwrap().iter().collect() };
            assert_eq!(positions_of(&by_key), positions_of(&by_position), "case {case}");
            // Every output row sits at the base row of its key (the keys of log rows are real).
            if let Some(rows) = &by_key.rows {
                let keys = rows.column(2).as_string::<i32>();
                for (row, position) in positions_of(&by_key).iter().enumerate() {
                    assert_eq!(keys.value(row), base_keys[position.unwrap() as usize], "case {case}");
                }
            }
            let values = |merged: Merged| merged.rows.map(|r| r.column(6).as_string::<i32>().iter().map(|v| v.unwrap().to_owned()).collect::<Vec<_>>());
            assert_eq!(values(by_key), values(by_position), "case {case}");
        }
    }

    /// `batch` with NULL record keys, as a base file read without its key column.
    fn without_keys(batch: &RecordBatch) -> RecordBatch {
        let mut columns = batch.columns().to_vec();
        columns[2] = arrow::array::new_null_array(&DataType::Utf8, batch.num_rows());
        RecordBatch::try_new(batch.schema(), columns).unwrap()
    }

    #[test]
    fn positions_must_name_one_row_per_record() {
        let s = schema();
        let MergeSource::Data { rows: base, .. } = rows(&s, &[("a", 1, "base")]) else { unreachable!() };
        let MergeSource::Data { rows: log, .. } = rows(&s, &[("a", 2, "log")]) else { unreachable!() };
        let sources = vec![MergeSource::Base(base), MergeSource::Data { rows: log, positions: Some(vec![0, 1]) }];
        let error = merge(&s, sources, EVENT, None, MergeOutput::default()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corrupt);
    }

    #[test]
    fn partial_updates_fill_columns_from_every_version() {
        let data = Schema::new(vec![
            Field::new("ts", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("email", DataType::Utf8, true),
        ]);
        let s = table_schema(&data, true);
        let batch = |key: &str, ts: i64, name: Option<&str>, email: Option<&str>| {
            let nulls = || Arc::new(StringArray::from(vec![None::<&str>])) as Arc<dyn Array>;
            MergeSource::rows(
                RecordBatch::try_new(
                    s.clone(),
                    vec![
                        nulls(),
                        nulls(),
                        Arc::new(StringArray::from(vec![key])),
                        nulls(),
                        nulls(),
                        Arc::new(Int64Array::from(vec![ts])),
                        Arc::new(StringArray::from(vec![name])),
                        Arc::new(StringArray::from(vec![email])),
                    ],
                )
                .unwrap(),
            )
        };
        let merged = merge_versions(
            &s,
            vec![
                batch("a", 10, Some("ann"), None),
                batch("a", 20, None, Some("ann@x")),    // newer: fills email, keeps name
                batch("a", 5, Some("stale"), Some("old@x")), // older: loses where a value exists
                batch("b", 10, Some("bob"), None),
                batch("b", 1, Some("bobby"), Some("bob@x")), // older: only fills the NULL
                batch("c", 10, Some("cy"), Some("cy@x")),
            ],
            MergeRule { mode: MergeMode::PartialUpdate, ordering_column: Some(5) },
        );
        let rows = merged.rows.unwrap();
        let text = |c: usize| rows.column(c).as_string::<i32>().iter().map(|v| v.map(str::to_owned)).collect::<Vec<_>>();
        let keys = text(2);
        let mut got: Vec<(String, Option<String>, Option<String>)> =
            keys.into_iter().zip(text(6)).zip(text(7)).map(|((k, n), e)| (k.unwrap(), n, e)).collect();
        got.sort();
        let some = |v: &str| Some(v.to_owned());
        assert_eq!(
            got,
            [
                ("a".to_owned(), some("ann"), some("ann@x")),
                ("b".to_owned(), some("bob"), some("bob@x")),
                ("c".to_owned(), some("cy"), some("cy@x")),
            ]
        );
        let ts = rows.column(5).as_primitive::<arrow::datatypes::Int64Type>();
        assert!(ts.iter().all(|t| t.is_some_and(|t| t >= 10)), "meta and ordering come from the winning version");
    }

    #[test]
    fn deletes_follow_the_ordering_rules() {
        let s = schema();
        let merged = merge_versions(
            &s,
            vec![
                rows(&s, &[("a", 10, "a"), ("b", 10, "b"), ("c", 10, "c"), ("d", 10, "d")]),
                delete("a", OrderingValue::Int(0)),  // default ordering: deletes regardless
                delete("b", OrderingValue::Int(5)),  // lower ordering: ignored
                delete("c", OrderingValue::Int(20)), // higher ordering: deletes
                delete("d", OrderingValue::Int(10)), // equal ordering: the newer delete wins
                rows(&s, &[("c", 15, "c-late")]),    // lower than the delete: stays deleted
                rows(&s, &[("a", 1, "a-reinserted")]),
            ],
            EVENT,
        );
        assert_eq!(
            result(merged),
            pairs(&[("a", "a-reinserted"), ("b", "b")])
        );
    }

    #[test]
    fn commit_time_takes_the_newest() {
        let s = schema();
        let merged = merge_versions(
            &s,
            vec![rows(&s, &[("a", 10, "old")]), rows(&s, &[("a", 1, "new")]), delete("b", OrderingValue::Null)],
            MergeRule { mode: MergeMode::CommitTimeOrdering, ordering_column: Some(5) },
        );
        assert_eq!(result(merged), [("a".to_owned(), "new".to_owned())]);
    }

    #[test]
    fn a_key_alive_before_the_range_is_an_update_whatever_the_merge_order() {
        // Writer A (instant 3) started before writer B (instant 5) but completed inside the
        // range, after B completed before it: A merges first, yet B's row was what a reader of
        // the range start saw.
        let s = schema();
        let in_range: WritesInRange = ["3"].into_iter().collect();
        let merged = merge(
            &s,
            vec![rows_at(&s, Some("3"), &[("k", 9, "A")]), rows_at(&s, Some("5"), &[("k", 5, "B")])],
            EVENT,
            Some(&in_range),
            MergeOutput::default(),
        )
        .unwrap();
        assert_eq!(merged.alive_before_range, [true]);
        assert_eq!(result(merged), pairs(&[("k", "A")]));
        // B's delete before the range, A's row inside it: A re-inserts the key.
        let merged = merge(
            &s,
            vec![
                rows_at(&s, Some("3"), &[("k", 9, "A")]),
                MergeSource::Deletes {
                    records: vec![DeleteRecord { record_key: "k".into(), partition_path: None, ordering: OrderingValue::Int(5) }],
                    instant: "5".into(),
                    positions: None,
                },
            ],
            EVENT,
            Some(&in_range),
            MergeOutput::default(),
        )
        .unwrap();
        assert_eq!(merged.alive_before_range, [false]);
    }

    #[test]
    fn change_tracking_knows_inserts_updates_and_deletes_in_range() {
        let s = schema();
        let in_range: WritesInRange = ["2"].into_iter().collect();
        let merged = merge(
            &s,
            vec![
                rows_at(&s, Some("1"), &[("a", 1, "a1"), ("b", 1, "b1"), ("c", 1, "c1")]),
                rows_at(&s, Some("2"), &[("a", 2, "a2"), ("d", 2, "d2")]),
                MergeSource::Deletes {
                    records: vec![DeleteRecord { record_key: "b".into(), partition_path: Some("p".into()), ordering: OrderingValue::Int(0) }],
                    instant: "2".into(),
                    positions: None,
                },
                rows_at(&s, Some("2"), &[("e", 2, "e2")]),
                MergeSource::Deletes {
                    records: vec![DeleteRecord { record_key: "e".into(), partition_path: None, ordering: OrderingValue::Int(0) }],
                    instant: "2".into(),
                    positions: None,
                },
            ],
            EVENT,
            Some(&in_range),
            MergeOutput::default(),
        )
        .unwrap();
        assert_eq!(merged.alive_before_range, [true, false, false]); // a, c, d
        let deleted = |key: &str, partition: Option<&str>, alive_before_range| DeletedKey {
            record_key: key.into(),
            partition_path: partition.map(str::to_owned),
            instant: "2".into(),
            alive_before_range,
        };
        assert_eq!(
            merged.deleted,
            [deleted("b", Some("p"), true), deleted("e", None, false)],
            "e was inserted and deleted inside the range: no change to report"
        );
        assert_eq!(result(merged).len(), 3);
    }
}
