//! Merging a chain of runs in key order, one record per run in memory ([`merge`]), and what is
//! made of the merge: a new base run ([`materialize`]), the keyed snapshot payload of a
//! restore ([`payload`], [`payload_of`]), and the check of a chain ([`verify`]). Not the run
//! format, nor reading or writing one run (the parent module).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::ops::Range;
use std::path::Path;

use super::{Record, RunFile, RunReader, RunRef, GONE, OWN};
use crate::state::changes::{head, ARRAY, UNSIGNED};

/// A run's current record in a merge, ordered so that the heap's top is the smallest key,
/// and of equal keys the newest run's.
struct Head {
    rec: Record,
    run: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        other.rec.order(&self.rec).then(self.run.cmp(&other.run))
    }
}

/// Merges `runs` (oldest first, the first a base) in key order: `out` is given each key's
/// newest record, keys that are gone left out. Checks each run against its reference.
pub(crate) fn merge<R: Read + Seek>(
    runs: Vec<(RunReader<R>, &RunRef)>,
    mut out: impl FnMut(&Record) -> Result<(), String>,
) -> Result<(), String> {
    let (mut readers, refs): (Vec<_>, Vec<_>) = runs.into_iter().unzip();
    let mut heap = BinaryHeap::with_capacity(readers.len());
    for (run, r) in readers.iter_mut().enumerate() {
        let mut rec = Record::default();
        if r.next(&mut rec)? {
            heap.push(Head { rec, run });
        }
    }
    while let Some(top) = heap.pop() {
        // Older records of the same key are superseded.
        while heap
            .peek()
            .is_some_and(|h| h.rec.order(&top.rec) == Ordering::Equal)
        {
            if let Some(mut old) = heap.pop() {
                if readers[old.run].next(&mut old.rec)? {
                    heap.push(old);
                }
            }
        }
        if top.rec.kind != GONE {
            out(&top.rec)?;
        }
        let Head { mut rec, run } = top;
        if readers[run].next(&mut rec)? {
            heap.push(Head { rec, run });
        }
    }
    for (r, expected) in readers.into_iter().zip(refs) {
        r.check(expected)?;
    }
    Ok(())
}

/// A run read from its file.
type FileRun = RunReader<BufReader<File>>;

/// Opens every run of `chain` under `root`, for the key groups `range` (all: `None`).
fn open_chain<'a>(
    root: &Path,
    chain: &'a [RunRef],
    range: Option<Range<u32>>,
) -> Result<Vec<(FileRun, &'a RunRef)>, String> {
    chain
        .iter()
        .map(|r| RunReader::open_range(root, r, range.clone()).map(|reader| (reader, r)))
        .collect()
}

/// Merges `chain` into one base run, `file` under `root`, streamed (one record per run in
/// memory), fsynced and renamed into place.
pub(crate) fn materialize(root: &Path, chain: &[RunRef], file: &str) -> Result<RunRef, String> {
    let mut run = RunFile::create(root, file)?;
    let (w, tmp) = (&mut run.w, &run.tmp);
    merge(open_chain(root, chain, None)?, |rec| {
        w.record(rec.kind, rec.group, &rec.key, &rec.value)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))
    })?;
    run.finish()
}

/// The keyed snapshot payload that `chain` under `root` holds: the CBOR
/// `Vec<(usize, Vec<entry>)>` in ascending key group, preceded by the operator's own fields as
/// a pair if the chain has them: what the keyed operator's restore reads.
pub(crate) fn payload(root: &Path, chain: &[RunRef]) -> Result<Vec<u8>, String> {
    merge_payload(open_chain(root, chain, None)?)
}

/// [`payload`] of the key groups `range` only (and the operator's own fields): only the
/// runs' blocks that hold those groups are read.
pub(crate) fn payload_of(
    root: &Path,
    chain: &[RunRef],
    range: Range<u32>,
) -> Result<Vec<u8>, String> {
    merge_payload(open_chain(root, chain, Some(range))?)
}

/// Checks that every run of `chain` under `root` is there, of its length, with its index's
/// checksum (and its own fields' block): what can be checked without reading the entries. A
/// run of the first format, which has no index, is read and checked whole.
pub(crate) fn verify(root: &Path, chain: &[RunRef]) -> Result<(), String> {
    let mut rec = Record::default();
    for r in chain {
        let mut reader = RunReader::open_range(root, r, Some(0..0))?;
        while reader.next(&mut rec)? {}
        reader.check(r)?;
    }
    Ok(())
}

pub(super) fn merge_payload<R: Read + Seek>(
    runs: Vec<(RunReader<R>, &RunRef)>,
) -> Result<Vec<u8>, String> {
    let mut own: Option<Vec<u8>> = None;
    let (mut body, mut groups) = (Vec::new(), 0u64);
    let mut group: Option<(u32, u64, Vec<u8>)> = None;
    let close = |body: &mut Vec<u8>, groups: &mut u64, g: (u32, u64, Vec<u8>)| {
        head(body, ARRAY, 2);
        head(body, UNSIGNED, u64::from(g.0));
        head(body, ARRAY, g.1);
        body.extend_from_slice(&g.2);
        *groups += 1;
    };
    merge(runs, |rec| {
        if rec.kind == OWN {
            own = Some(rec.value.clone());
            return Ok(());
        }
        match &mut group {
            Some((g, n, entries)) if *g == rec.group => {
                *n += 1;
                entries.extend_from_slice(&rec.value);
            }
            _ => {
                if let Some(done) = group.replace((rec.group, 1, rec.value.clone())) {
                    close(&mut body, &mut groups, done);
                }
            }
        }
        Ok(())
    })?;
    if let Some(done) = group.take() {
        close(&mut body, &mut groups, done);
    }
    let mut out = Vec::with_capacity(body.len() + own.as_ref().map_or(0, Vec::len) + 16);
    if let Some(own) = &own {
        head(&mut out, ARRAY, 2);
        out.extend_from_slice(own);
    }
    head(&mut out, ARRAY, groups);
    out.extend_from_slice(&body);
    Ok(out)
}
