//! Reading ahead: while the caller consumes the rows of one file slice, the next slices are
//! decoded and merged on helper threads. The caller keeps all I/O: [`SliceScan`] fetches each
//! slice ([`TableReader::fetch_slice`]) on the caller's runtime, while it waits for the oldest
//! slice in flight, and hands the fetched bytes over; a helper only runs [`SliceRead::run`],
//! CPU work on memory it owns. Helpers block every signal, so that a host's signal handlers
//! (PostgreSQL's) only ever run on the host's own thread.
//!
//! Memory: the slice being consumed plus up to `depth` slices in flight.

use std::collections::VecDeque;

use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::read::{ScanOptions, ScanStats, SliceQuery, SliceRead, TableReader};
use crate::view::FileSlice;

type SliceRows = Result<Option<RecordBatch>>;

/// What a scan makes of each slice's rows on the thread that merged them (an aggregate's
/// partial, say); its output is what [`SliceScan::next`] returns.
pub type Transform = std::sync::Arc<dyn Fn(Option<RecordBatch>) -> SliceRows + Send + Sync>;

/// Hands out the slices of a scan shared by processes (a parallel scan): the index of the
/// next slice this scan reads, or `None` when every slice is taken.
pub type Claim = Box<dyn FnMut() -> Option<usize>>;

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
    let rows = read.run()?;
    match transform {
        Some(transform) => transform(rows),
        None => Ok(rows),
    }
}

/// A scan of file slices in order, fetching and merging up to `depth` slices ahead on the
/// process's helper threads ([`crate::threads::HELPERS`]); with depth 0, each slice is decoded
/// on the caller's thread when its rows are asked for.
pub struct SliceScan {
    reader: TableReader,
    query: SliceQuery,
    options: ScanOptions,
    slices: Vec<FileSlice>,
    /// The next slice to fetch, when this scan reads them all in order.
    next_slice: usize,
    /// Where the next slice comes from instead, when other processes read the same slices.
    claim: Option<Claim>,
    depth: usize,
    /// Fetched slices (by index in `slices`), oldest first.
    pending: VecDeque<(usize, Pending)>,
    /// The slice whose rows `next` returned last.
    current: Option<usize>,
    stats: ScanStats,
    transform: Option<Transform>,
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
        SliceScan {
            reader,
            query,
            options,
            slices,
            next_slice: 0,
            claim: None,
            depth,
            pending: VecDeque::new(),
            current: None,
            stats,
            transform: None,
        }
    }

    /// The scan reads the slices `claim` hands out, in the order it does (from now on: slices
    /// already in flight are dropped).
    pub fn claiming(&mut self, claim: Claim) {
        self.pending.clear();
        self.claim = Some(claim);
    }

    /// The reader, options and slices of the scan.
    pub fn parts(&self) -> (&TableReader, &ScanOptions, &[FileSlice]) {
        (&self.reader, &self.options, &self.slices)
    }

    /// The scan returns what `transform` makes of each slice's rows.
    pub fn with_transform(mut self, transform: Transform) -> SliceScan {
        self.transform = Some(transform);
        self
    }

    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }

    /// Starts over from the first slice; slices in flight are dropped.
    pub fn restart(&mut self) {
        self.next_slice = 0;
        self.pending.clear();
        self.current = None;
    }

    /// The slice whose rows the last [`Self::next`] returned.
    pub fn current_slice(&self) -> Option<&FileSlice> {
        self.current.map(|i| &self.slices[i])
    }

    /// The rows of the next slice (`Ok(None)`: it has none); `None` after the last one.
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

    /// Fetches and starts slices until `in_flight` are pending or none is left.
    async fn fetch_ahead(&mut self, in_flight: usize) -> Result<()> {
        while self.pending.len() < in_flight {
            let index = match &mut self.claim {
                Some(claim) => claim().filter(|&i| i < self.slices.len()),
                None => Some(self.next_slice).filter(|&i| i < self.slices.len()),
            };
            let Some(index) = index else { break };
            self.next_slice = index + 1;
            let read = self.reader.fetch_slice(&self.slices[index], &self.query, &self.options, &mut self.stats).await?;
            self.pending.push_back((index, Pending::start(read, self.depth > 0, self.transform.clone())));
        }
        Ok(())
    }
}
