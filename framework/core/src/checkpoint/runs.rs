//! Sorted runs: the files that hold a keyed operator's state in incremental checkpoints.
//!
//! A run is one file of keyed entries sorted by key group, then by encoded key: a delta (the
//! entries an operator wrote since its previous checkpoint, and the keys it dropped) or a
//! base (every entry). A checkpoint references a chain of runs, a base and the deltas after
//! it ([`RunRef`], each with its length and checksum); the newest run's record of a key wins.
//! Because runs are sorted, a chain is merged in one pass holding one record per run
//! ([`merge`]): that makes a new base off the data path ([`materialize`]), and the
//! operator's snapshot payload when a checkpoint is restored ([`payload`]).
//!
//! Format: the 8 bytes `WEIRRUN1`, then one LZ4 frame (entries repeat much: field layouts,
//! padded strings) of records `kind: u8, group: u32 LE, key length: u32 LE, value length:
//! u32 LE, key, value` (kind 1: an entry, its value the whole CBOR entry as the keyed snapshot
//! holds it; 2: the key is gone; 3: the operator's own fields, with an empty key in group 0,
//! so first), ending with a record of kind 0; nothing after the frame.
//!
//! This module owns the format and reading, writing and merging runs; not when runs are
//! written (`checkpoint::incremental`) or deleted (`store`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use crate::state::changes::{head, KeyedDelta, ARRAY, UNSIGNED};

const MAGIC: &[u8; 8] = b"WEIRRUN1";
const END: u8 = 0;
const ENTRY: u8 = 1;
const GONE: u8 = 2;
const OWN: u8 = 3;

/// A run file that a checkpoint's state references, as its state file records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunRef {
    /// The file, relative to the directory of the job's run (`shared/<uid>-<subtask>/..`).
    pub file: String,
    /// Its length in bytes.
    pub len: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
}

/// One record of a run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) kind: u8,
    pub(crate) group: u32,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

impl Record {
    fn order(&self, other: &Record) -> Ordering {
        (self.group, &self.key).cmp(&(other.group, &other.key))
    }
}

fn record(
    out: &mut impl Write,
    kind: u8,
    group: u32,
    key: &[u8],
    value: &[u8],
) -> std::io::Result<()> {
    let len = |b: &[u8]| {
        u32::try_from(b.len()).map_err(|_| std::io::Error::other("a state entry over 4 GiB"))
    };
    let mut head = [0u8; 13];
    head[0] = kind;
    head[1..5].copy_from_slice(&group.to_le_bytes());
    head[5..9].copy_from_slice(&len(key)?.to_le_bytes());
    head[9..13].copy_from_slice(&len(value)?.to_le_bytes());
    out.write_all(&head)?;
    out.write_all(key)?;
    out.write_all(value)
}

/// The order in which `delta`'s entries are written: sorted by (key group, encoded key), of
/// a key written twice only the last.
fn sorted(delta: &KeyedDelta) -> Vec<usize> {
    let key = |i: usize| {
        let e = &delta.index[i];
        (e.group, &delta.bytes[e.key.0 as usize..e.key.1 as usize])
    };
    // Sorted by (group, the key's first 8 bytes as a number) first: integer comparisons for
    // nearly every pair, the bytes only on a tie; then by position, so that of a key written
    // twice the later stays later (the order is that of (group, key bytes) throughout).
    let prefix = |k: &[u8]| {
        let mut b = [0u8; 8];
        let n = k.len().min(8);
        b[..n].copy_from_slice(&k[..n]);
        u64::from_be_bytes(b)
    };
    let mut order: Vec<(u32, u64, u32)> = (0..delta.index.len())
        .map(|i| {
            let (g, k) = key(i);
            (g, prefix(k), i as u32)
        })
        .collect();
    order.sort_unstable_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| key(a.2 as usize).1.cmp(key(b.2 as usize).1))
            .then(a.2.cmp(&b.2))
    });
    let mut kept = Vec::with_capacity(order.len());
    for (n, &(_, _, i)) in order.iter().enumerate() {
        let i = i as usize;
        if order
            .get(n + 1)
            .is_none_or(|&(_, _, j)| key(j as usize) != key(i))
        {
            kept.push(i);
        }
    }
    kept
}

/// Writes the records of `delta` to `out`: its own fields first, then its entries in order,
/// then the end.
fn write_records(delta: &KeyedDelta, out: &mut impl Write) -> std::io::Result<()> {
    if let Some(own) = &delta.own {
        record(out, OWN, 0, &[], own)?;
    }
    for i in sorted(delta) {
        let e = &delta.index[i];
        let k = &delta.bytes[e.key.0 as usize..e.key.1 as usize];
        match e.entry {
            Some((a, b)) => record(out, ENTRY, e.group, k, &delta.bytes[a as usize..b as usize])?,
            None => record(out, GONE, e.group, k, &[])?,
        }
    }
    record(out, END, 0, &[], &[])
}

/// The run of `delta`, in memory.
#[cfg(test)]
pub(crate) fn encode(delta: &KeyedDelta) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let mut frame = lz4_flex::frame::FrameEncoder::new(&mut out);
    // Writing to a Vec fails only for entries over 4 GiB, which `KeyedDelta` refuses.
    let _ = write_records(delta, &mut frame);
    let _ = frame.finish();
    out
}

/// Writes `delta` as the run `file` under `root`, durably (streamed to a temporary file,
/// fsynced, renamed, its directory fsynced); returns its reference.
pub(crate) fn write(root: &Path, file: &str, delta: &KeyedDelta) -> Result<RunRef, String> {
    let mut run = RunFile::create(root, file)?;
    write_records(delta, &mut run.w).map_err(|e| run.error(e))?;
    run.finish()
}

/// A run being written: to a temporary file, summed as it goes.
struct RunFile {
    path: std::path::PathBuf,
    tmp: std::path::PathBuf,
    file: String,
    w: lz4_flex::frame::FrameEncoder<Summed<BufWriter<File>>>,
}

struct Summed<W> {
    w: W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

impl RunFile {
    fn create(root: &Path, file: &str) -> Result<Self, String> {
        let path = root.join(file);
        let tmp = path.with_extension("tmp");
        let io = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
        if let Some(trouble) = crate::fault::write_fault(&path) {
            return Err(io(trouble.error()));
        }
        if let Some(dir) = path.parent() {
            crate::checkpoint::store::create_dir_durable(dir).map_err(io)?;
        }
        let f = File::create(&tmp).map_err(io)?;
        let mut raw = Summed {
            w: BufWriter::with_capacity(1 << 16, f),
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        raw.write_all(MAGIC).map_err(io)?;
        Ok(RunFile {
            w: lz4_flex::frame::FrameEncoder::new(raw),
            path,
            tmp,
            file: file.to_owned(),
        })
    }

    fn error(&self, e: std::io::Error) -> String {
        format!("cannot write {}: {e}", self.tmp.display())
    }

    /// Syncs the run and renames it into place.
    fn finish(self) -> Result<RunRef, String> {
        let RunFile { path, tmp, file, w } = self;
        let io = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
        let Summed { w, crc, len } = w.finish().map_err(|e| io(std::io::Error::other(e)))?;
        let f = w.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(io)?;
        if let Some(dir) = path.parent() {
            crate::checkpoint::store::sync_dir(dir).map_err(io)?;
        }
        Ok(RunRef {
            file,
            len,
            crc32: crc.finalize(),
        })
    }
}

/// Counts and sums what is read through it: a run's file as it is on disk.
struct SummedRead<R> {
    r: R,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<R: Read> Read for SummedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.r.read(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// Reads the records of one run, checking its length and checksum at the end.
pub(crate) struct RunReader<R: Read> {
    r: lz4_flex::frame::FrameDecoder<SummedRead<R>>,
    ended: bool,
    name: String,
}

impl RunReader<BufReader<File>> {
    /// Opens the run `r` of the job run directory `root`.
    pub(crate) fn open(root: &Path, r: &RunRef) -> Result<Self, String> {
        let path = root.join(&r.file);
        let f = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        RunReader::new(BufReader::with_capacity(1 << 16, f), &r.file)
    }
}

impl<R: Read> RunReader<R> {
    fn new(r: R, name: &str) -> Result<Self, String> {
        let mut raw = SummedRead {
            r,
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        let mut magic = [0u8; 8];
        raw.read_exact(&mut magic)
            .map_err(|e| format!("{name} ends early ({e}): the file is truncated"))?;
        if &magic != MAGIC {
            return Err(format!("{name} is not a state run of this version"));
        }
        Ok(RunReader {
            r: lz4_flex::frame::FrameDecoder::new(raw),
            ended: false,
            name: name.to_owned(),
        })
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), String> {
        self.r.read_exact(buf).map_err(|e| {
            format!(
                "{} cannot be read to its end ({e}): the file is truncated or corrupted",
                self.name
            )
        })
    }

    /// Reads the next record into `rec`; `false` at the end of the run.
    pub(crate) fn next(&mut self, rec: &mut Record) -> Result<bool, String> {
        if self.ended {
            return Ok(false);
        }
        let mut head = [0u8; 13];
        self.fill(&mut head)?;
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        rec.kind = head[0];
        rec.group = word(1);
        let (klen, vlen) = (word(5) as usize, word(9) as usize);
        if !matches!(rec.kind, END | ENTRY | GONE | OWN) || klen + vlen > 1 << 31 {
            return Err(format!(
                "{} holds a malformed record: the file is corrupted",
                self.name
            ));
        }
        rec.key.resize(klen, 0);
        rec.value.resize(vlen, 0);
        let (mut key, mut value) = (std::mem::take(&mut rec.key), std::mem::take(&mut rec.value));
        let read = self.fill(&mut key).and_then(|()| self.fill(&mut value));
        (rec.key, rec.value) = (key, value);
        read?;
        if rec.kind == END {
            self.ended = true;
            return Ok(false);
        }
        Ok(true)
    }

    /// Checks that the run ended where and as `expected` says.
    pub(crate) fn check(mut self, expected: &RunRef) -> Result<(), String> {
        let mut rest = Vec::new();
        let frame_rest = self.r.read_to_end(&mut rest);
        let mut raw = self.r.into_inner();
        let mut trailing = Vec::new();
        let _ = raw.read_to_end(&mut trailing);
        let crc = raw.crc.finalize();
        if !self.ended
            || frame_rest.is_err()
            || !rest.is_empty()
            || raw.len != expected.len
            || crc != expected.crc32
        {
            return Err(format!(
                "{} does not match its checkpoint ({} bytes and checksum {crc:08x}, the checkpoint says {} and {:08x}): the file is corrupted",
                self.name, raw.len, expected.len, expected.crc32
            ));
        }
        Ok(())
    }
}

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
pub(crate) fn merge<R: Read>(
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

/// Opens every run of `chain` under `root`.
fn open_chain<'a>(root: &Path, chain: &'a [RunRef]) -> Result<Vec<(FileRun, &'a RunRef)>, String> {
    chain
        .iter()
        .map(|r| RunReader::open(root, r).map(|reader| (reader, r)))
        .collect()
}

/// Merges `chain` into one base run, `file` under `root`, streamed (one record per run in
/// memory), fsynced and renamed into place.
pub(crate) fn materialize(root: &Path, chain: &[RunRef], file: &str) -> Result<RunRef, String> {
    let mut run = RunFile::create(root, file)?;
    let (w, tmp) = (&mut run.w, &run.tmp);
    merge(open_chain(root, chain)?, |rec| {
        record(w, rec.kind, rec.group, &rec.key, &rec.value)
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))
    })?;
    record(&mut run.w, END, 0, &[], &[]).map_err(|e| run.error(e))?;
    run.finish()
}

/// The keyed snapshot payload that `chain` under `root` holds: the CBOR
/// `Vec<(usize, Vec<entry>)>` in ascending key group, preceded by the operator's own fields as
/// a pair if the chain has them: what the keyed operator's restore reads.
pub(crate) fn payload(root: &Path, chain: &[RunRef]) -> Result<Vec<u8>, String> {
    merge_payload(open_chain(root, chain)?)
}

fn merge_payload<R: Read>(runs: Vec<(RunReader<R>, &RunRef)>) -> Result<Vec<u8>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    type Payload = Vec<(usize, Vec<(u64, String)>)>;

    fn delta(full: bool, entries: &[(usize, u64, Option<&str>)]) -> KeyedDelta {
        let mut d = KeyedDelta::new(full);
        for (g, k, v) in entries {
            d.push(*g, k, v.map(|v| (*k, v.to_owned())).as_ref())
                .expect("encodes");
        }
        d
    }

    fn reference(bytes: &[u8]) -> RunRef {
        RunRef {
            file: "run".into(),
            len: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
        }
    }

    fn merged(runs: &[Vec<u8>]) -> Result<Payload, String> {
        let refs: Vec<RunRef> = runs.iter().map(|r| reference(r)).collect();
        let readers = runs
            .iter()
            .zip(&refs)
            .map(|(r, rf)| RunReader::new(r.as_slice(), "run").map(|x| (x, rf)))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = merge_payload(readers)?;
        let mut p: Payload = ciborium::from_reader(bytes.as_slice()).map_err(|e| e.to_string())?;
        for (_, entries) in &mut p {
            entries.sort();
        }
        Ok(p)
    }

    #[test]
    fn a_chain_merges_to_the_newest_entry_of_each_key() {
        let base = encode(&delta(
            true,
            &[(300, 3, Some("c")), (0, 1, Some("a")), (0, 2, Some("b"))],
        ));
        let d1 = encode(&delta(false, &[(7, 4, Some("d")), (0, 1, Some("a2"))]));
        let d2 = encode(&delta(
            false,
            &[(0, 2, None), (7, 4, Some("d2")), (9, 5, None)],
        ));
        assert_eq!(
            merged(&[base.clone(), d1.clone(), d2]).expect("merges"),
            vec![
                (0, vec![(1, "a2".into())]),
                (7, vec![(4, "d2".into())]),
                (300, vec![(3, "c".into())]),
            ]
        );
        assert_eq!(
            merged(&[base, d1]).expect("merges"),
            vec![
                (0, vec![(1, "a2".into()), (2, "b".into())]),
                (7, vec![(4, "d".into())]),
                (300, vec![(3, "c".into())]),
            ]
        );
    }

    #[test]
    fn a_payload_reads_back_as_a_run() {
        let payload = crate::checkpoint::encode(&vec![
            (2usize, vec![(5u64, "e".to_owned()), (4, "d".into())]),
            (9, vec![(1, "a".into())]),
        ])
        .expect("encodes");
        let run = encode(&KeyedDelta::from_payload(payload, false).expect("reads"));
        let p = merged(&[run]).expect("merges");
        assert_eq!(
            p,
            vec![
                (2, vec![(4, "d".into()), (5, "e".into())]),
                (9, vec![(1, "a".into())])
            ]
        );
        // With the operator's own fields first.
        let own = crate::checkpoint::encode(&("own", vec![(3usize, vec![(1u64, "x".to_owned())])]))
            .expect("encodes");
        let d = KeyedDelta::from_payload(own, true).expect("reads");
        let refs = [reference(&encode(&d))];
        let run = encode(&d);
        let bytes = merge_payload(vec![(
            RunReader::new(run.as_slice(), "r").expect("opens"),
            &refs[0],
        )])
        .expect("merges");
        let back: (String, Payload) = ciborium::from_reader(bytes.as_slice()).expect("decodes");
        assert_eq!(back, ("own".into(), vec![(3, vec![(1, "x".into())])]));
    }

    #[test]
    fn damaged_runs_are_named_not_misread() {
        let run = encode(&delta(true, &[(0, 1, Some("a")), (1, 2, Some("b"))]));
        // A bit flipped in the last entry's value.
        let mut flipped = run.clone();
        flipped[run.len() - 15] ^= 1;
        let rf = reference(&run);
        let r = RunReader::new(flipped.as_slice(), "run").expect("opens");
        let err = merge_payload(vec![(r, &rf)]).expect_err("a flipped bit is found");
        assert!(err.contains("corrupted"), "{err}");
        let err = merged(&[run[..run.len() - 5].to_vec()]).expect_err("a truncated run");
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn materializing_a_chain_writes_one_equal_base() {
        let dir = std::env::temp_dir().join(format!("weir-runs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let chain = vec![
            write(
                &dir,
                "s/1.full",
                &delta(true, &[(0, 1, Some("a")), (4, 2, Some("b"))]),
            )
            .expect("writes"),
            write(
                &dir,
                "s/2.delta",
                &delta(false, &[(4, 2, None), (5, 3, Some("c"))]),
            )
            .expect("writes"),
        ];
        let base = materialize(&dir, &chain, "s/3.merged").expect("merges");
        assert_eq!(
            payload(&dir, &chain).expect("reads"),
            payload(&dir, &[base]).expect("reads")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
