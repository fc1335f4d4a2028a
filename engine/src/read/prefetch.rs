//! Reading ahead: while the caller consumes the rows of one file slice, the next slices are
//! decoded and merged on helper threads. The caller keeps all I/O: [`SliceScan`] fetches each
//! slice ([`TableReader::fetch_slice`]) on the caller's runtime, while it waits for the oldest
//! slice in flight, and hands the fetched bytes over; a helper only runs [`SliceRead::run`],
//! CPU work on memory it owns. Helpers block every signal, so that a host's signal handlers
//! (PostgreSQL's) only ever run on the host's own thread.
//!
//! Memory: the slice being consumed plus up to `depth` slices in flight.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::{and, concat, filter};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{Error, ErrorKind, Result};
use crate::read::condition::Condition;
use crate::read::filter::ScanFilter;
use crate::read::schema::NullColumns;
use crate::read::slice::RowParts;
use crate::read::{ScanOptions, ScanStats, SlicePart, SliceQuery, SliceRead, TableReader};
use crate::view::FileSlice;

type SliceRows = Result<Option<RecordBatch>>;

/// What a scan makes of each slice's rows, given in parts ([`SliceRead::run_parts`]), on the
/// thread that merged them (an aggregate's partial, say); its output is what
/// [`SliceScan::next`] returns.
pub type Transform = std::sync::Arc<dyn Fn(RowParts) -> SliceRows + Send + Sync>;

/// Hands out the units of a scan shared by processes (a parallel scan): the index of the
/// next unit this scan reads, or `None` when every unit is taken.
pub type Claim = Box<dyn FnMut() -> Option<usize>>;

/// What one process of a scan shared by processes reads at a time: a slice (by index in the
/// scan's slices), or a part of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanUnit {
    pub slice: usize,
    pub part: SlicePart,
}

/// A part of a base file has this many of its bytes at least (of all its columns): each part
/// reads the footer and page index again, and of the columns but the largest, the pages at
/// its ends are read by both neighbours.
const MIN_PART_BYTES: u64 = 128 << 10;

/// A submitted slice.
enum Pending {
    /// Not started: with no read-ahead, a slice runs on the caller's thread when asked for.
    Waiting(Box<SliceRead>, Option<Transform>),
    Running(crate::threads::Answer<Option<RecordBatch>>),
}

impl Pending {
    /// Starts decoding and merging `read` on a helper thread (with `ahead`, and when a thread
    /// can be started; otherwise it runs on the caller's thread).
    fn start(read: SliceRead, ahead: bool, transform: Option<Transform>) -> Pending {
        if !ahead {
            return Pending::Waiting(Box::new(read), transform);
        }
        // A scan that ended (finished early, cancelled) drops its answers: slices it no
        // longer wants are not decoded.
        Pending::Running(crate::threads::on_helper("decoding a file slice", move || run(read, transform.as_ref())))
    }

    /// The slice's rows, once decoded.
    async fn rows(self) -> SliceRows {
        match self {
            Pending::Waiting(read, transform) => run(*read, transform.as_ref()),
            Pending::Running(answer) => answer.get().await,
        }
    }
}

fn run(read: SliceRead, transform: Option<&Transform>) -> SliceRows {
    match transform {
        Some(transform) => transform(read.run_parts()?),
        None => read.run(),
    }
}

/// The transform of a scan with a row filter: each part's rows that satisfy `condition`
/// (and its mask), in one batch; `dropped` counts the others. Filtering the parts spares
/// copying the base rows that stand only to drop most of them. Columns of NULLs only (those
/// the scan does not read) come from `nulls`, shared, rather than filtered and concatenated:
/// made per batch, a 16-column table's columns cost 40 MiB a slice.
fn row_filter(condition: Condition, dropped: Arc<AtomicU64>, nulls: NullColumns) -> Transform {
    Arc::new(move |parts: RowParts| {
        let kernel = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot filter rows").with_source(e);
        let mut kept = Vec::with_capacity(parts.len());
        for (rows, mask) in parts {
            let passes = condition.evaluate(&rows)?;
            let (keep, belonging) = match mask {
                Some(mask) => (and(&passes, &mask).map_err(kernel)?, mask.true_count()),
                None => (passes, rows.num_rows()),
            };
            let count = keep.true_count();
            dropped.fetch_add((belonging - count) as u64, Ordering::Relaxed);
            if count > 0 {
                kept.push((rows, keep, count));
            }
        }
        let Some((first, _, _)) = kept.first() else { return Ok(None) };
        let schema = first.schema();
        let total: usize = kept.iter().map(|(_, _, count)| count).sum();
        let columns = (0..schema.fields().len())
            .map(|c| {
                if kept.iter().all(|(rows, _, _)| rows.column(c).logical_null_count() == rows.num_rows()) {
                    return Ok(nulls.get(schema.field(c).data_type(), total));
                }
                let mut parts: Vec<ArrayRef> = kept
                    .iter()
                    .map(|(rows, keep, count)| match *count == rows.num_rows() {
                        true => Ok(rows.column(c).clone()),
                        false => filter(rows.column(c), keep),
                    })
                    .collect::<std::result::Result<_, _>>()
                    .map_err(kernel)?;
                match parts.len() {
                    1 => Ok(parts.pop().expect("one part")),
                    _ => concat(&parts.iter().map(|p| p.as_ref()).collect::<Vec<_>>()).map_err(kernel),
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(total));
        Ok(Some(RecordBatch::try_new_with_options(schema, columns, &options).map_err(kernel)?))
    })
}

/// A scan of file slices in order, fetching and merging up to `depth` slices ahead on the
/// process's helper threads ([`crate::threads::HELPERS`]); with depth 0, each slice is decoded
/// on the caller's thread when its rows are asked for.
pub struct SliceScan {
    reader: TableReader,
    query: SliceQuery,
    options: ScanOptions,
    slices: Vec<FileSlice>,
    /// What the scan reads, in order: each slice whole, unless the scan is shared by processes.
    units: Vec<ScanUnit>,
    /// The next unit to fetch, when this scan reads them all in order.
    next_unit: usize,
    /// Where the next unit comes from instead, when other processes read the same units.
    claim: Option<Claim>,
    depth: usize,
    /// Fetched units (by the index in `slices` of their slice), oldest first.
    pending: VecDeque<(usize, Pending)>,
    /// The slice whose rows `next` returned last.
    current: Option<usize>,
    stats: ScanStats,
    transform: Option<Transform>,
    /// Rows that the options' row filter dropped, counted on the threads that merge.
    rows_filtered: Arc<AtomicU64>,
}

impl SliceScan {
    /// A scan of `slices` of `reader`'s table (`stats`: what pruning kept, to which the scan
    /// adds the row groups it reads).
    pub fn new(
        reader: TableReader,
        query: SliceQuery,
        options: ScanOptions,
        slices: Vec<FileSlice>,
        stats: ScanStats,
        depth: usize,
    ) -> SliceScan {
        let units = (0..slices.len()).map(|slice| ScanUnit { slice, part: SlicePart::WHOLE }).collect();
        let rows_filtered = Arc::new(AtomicU64::new(0));
        let transform = options.row_filter.clone().map(|condition| row_filter(condition, rows_filtered.clone(), reader.nulls.clone()));
        SliceScan {
            reader,
            query,
            options,
            slices,
            units,
            next_unit: 0,
            claim: None,
            depth,
            pending: VecDeque::new(),
            current: None,
            stats,
            transform,
            rows_filtered,
        }
    }

    /// The scan reads those of `units` that `claim` hands out, in the order it does (from now
    /// on: units already in flight are dropped).
    pub fn claiming(&mut self, claim: Claim, units: Vec<ScanUnit>) {
        self.pending.clear();
        self.units = units;
        self.claim = Some(claim);
    }

    /// The units of this scan shared by `processes`: the slices split into about
    /// `per_process` units for each process, where that leaves a part at least
    /// `MIN_PART_BYTES` of its base file, so that the processes finish together and each
    /// starts on a small unit. Only slices whose rows need no merge are split ([`SlicePart`]).
    pub fn shared_units(&self, processes: usize, per_process: usize) -> Vec<ScanUnit> {
        let wanted = processes.max(1) * per_process.max(1);
        let parts = wanted.div_ceil(self.slices.len().max(1)) as u64;
        let snapshot = matches!(self.query, SliceQuery::Snapshot(_));
        let mut units = Vec::with_capacity(self.slices.len());
        for (index, slice) in self.slices.iter().enumerate() {
            let splittable = snapshot && slice.log_files.is_empty();
            let bytes = slice.base_file.as_ref().filter(|_| splittable).map_or(0, |base| base.size);
            let count = parts.min(bytes / MIN_PART_BYTES).clamp(1, u32::MAX as u64) as u32;
            units.extend((0..count).map(|part| ScanUnit { slice: index, part: SlicePart { index: part, count } }));
        }
        units
    }

    /// The reader, options and slices of the scan.
    pub fn parts(&self) -> (&TableReader, &ScanOptions, &[FileSlice]) {
        (&self.reader, &self.options, &self.slices)
    }

    /// The scan returns what `transform` makes of each slice's rows (instead of the rows
    /// that pass the options' row filter: the transform applies its own condition).
    pub fn with_transform(mut self, transform: Transform) -> SliceScan {
        self.transform = Some(transform);
        self
    }

    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }

    /// The rows the options' row filter dropped so far.
    pub fn rows_filtered(&self) -> u64 {
        self.rows_filtered.load(Ordering::Relaxed)
    }

    /// Filters rows by `condition` (bound) from now on, in place of the options' row filter;
    /// slices in flight, filtered by the old one, are dropped: call it before a (re)start.
    pub fn set_row_filter(&mut self, condition: Option<Condition>) {
        self.pending.clear();
        self.transform = condition.clone().map(|condition| row_filter(condition, self.rows_filtered.clone(), self.reader.nulls.clone()));
        self.options.row_filter = condition;
    }

    /// Reads `slices` (what pruning by `filter` kept, counted in `stats`) from now on, in place
    /// of the scan's: call it before a (re)start.
    pub fn set_slices(&mut self, filter: ScanFilter, slices: Vec<FileSlice>, stats: ScanStats) {
        self.pending.clear();
        self.units = (0..slices.len()).map(|slice| ScanUnit { slice, part: SlicePart::WHOLE }).collect();
        self.options.filter = filter;
        self.slices = slices;
        self.stats = stats;
        self.next_unit = 0;
        self.current = None;
    }

    /// Starts over from the first slice; slices in flight are dropped.
    pub fn restart(&mut self) {
        self.next_unit = 0;
        self.pending.clear();
        self.current = None;
    }

    /// The slice whose rows (or a part of them) the last [`Self::next`] returned.
    pub fn current_slice(&self) -> Option<&FileSlice> {
        self.current.map(|i| &self.slices[i])
    }

    /// The rows of the next unit (`Ok(None)`: it has none); `None` after the last one.
    pub async fn next(&mut self) -> Option<Result<Option<RecordBatch>>> {
        if self.pending.is_empty() {
            if let Err(e) = self.fetch_ahead(1).await {
                return Some(Err(e));
            }
        }
        let (index, oldest) = self.pending.pop_front()?;
        self.current = Some(index);
        // The next slices are fetched while the oldest one is decoded.
        let depth = self.depth;
        let (rows, fetched) = futures::join!(oldest.rows(), self.fetch_ahead(depth));
        Some(fetched.and(rows))
    }

    /// Fetches and starts units until `in_flight` are pending or none is left.
    async fn fetch_ahead(&mut self, in_flight: usize) -> Result<()> {
        while self.pending.len() < in_flight {
            let index = match &mut self.claim {
                Some(claim) => claim(),
                None => Some(self.next_unit),
            };
            let Some(&ScanUnit { slice, part }) = index.and_then(|i| self.units.get(i)) else { break };
            self.next_unit = index.map_or(self.next_unit, |i| i + 1);
            let read = self.reader.fetch_slice_part(&self.slices[slice], part, &self.query, &self.options, &mut self.stats).await?;
            // The last unit with none before it pending has nothing to overlap: the caller
            // waits for it anyway, so it runs on the caller's thread (a point query's one
            // slice, without two hand-offs to a helper thread).
            let last = self.claim.is_none() && self.next_unit >= self.units.len() && self.pending.is_empty();
            self.pending.push_back((slice, Pending::start(read, self.depth > 0 && !last, self.transform.clone())));
        }
        Ok(())
    }
}
