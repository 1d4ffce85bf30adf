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
//! Format (`WEIRRUN2`): the 8 bytes `WEIRRUN2`, then blocks, then an index and a trailer.
//! Records are `kind: u8, group: u32 LE, key length: u32 LE, value length: u32 LE, key, value`
//! (kind 1: an entry, its value the whole CBOR entry as the keyed snapshot holds it; 2: the
//! key is gone; 3: the operator's own fields, with an empty key in group 0, in a block of
//! their own, first). A block is about [`BLOCK_TARGET`] bytes of whole records (a key group
//! may go on in the next block), stored as its length (u32 LE) and one LZ4 block (entries
//! repeat much: field layouts, padded strings). The index lists each block's first and last
//! key group, offset, length and CRC-32; the trailer (24 bytes) the index's offset, length
//! and CRC-32 and the 8 bytes `WEIRIDX2`. A reader of some key groups reads the trailer, the
//! index and the blocks of its groups only ([`RunReader::open_range`]): what a restore at
//! another parallelism reads of each run. A run's [`RunRef::crc32`] is its index's, which
//! holds every block's: checked before a block is used. Runs of the first format
//! (`WEIRRUN1`: one LZ4 frame of records ending with a record of kind 0, no index, the
//! reference's checksum that of the whole file) are still read, whole.
//!
//! This module owns the format and reading, writing and merging runs; not when runs are
//! written (`checkpoint::incremental`) or deleted (`store`).

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::Path;

use crate::state::changes::KeyedDelta;

mod merge;

pub(crate) use merge::{materialize, payload, payload_of, verify};

const MAGIC_V1: &[u8; 8] = b"WEIRRUN1";
const MAGIC: &[u8; 8] = b"WEIRRUN2";
const INDEX_MAGIC: &[u8; 8] = b"WEIRIDX2";
/// Bytes of records (uncompressed) after which a block ends.
pub(crate) const BLOCK_TARGET: usize = 256 << 10;
/// One block's line in the index: flags, first and last group, offset, length, CRC-32.
const INDEX_LINE: usize = 1 + 4 + 4 + 8 + 8 + 4;
/// The trailer: the index's offset, length and CRC-32, and [`INDEX_MAGIC`].
const TRAILER: usize = 8 + 4 + 4 + 8;
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
    /// CRC-32 of its index (which holds each block's CRC-32); of the whole file for a run of
    /// the first format.
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
    #[inline]
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

/// A record's head as [`record`] writes it: kind, group, key length, value length.
fn record_head(head: &[u8; 13]) -> (u8, u32, usize, usize) {
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    (head[0], word(1), word(5) as usize, word(9) as usize)
}

/// One block of a run, as its index lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    /// It holds the operator's own fields (and nothing else).
    own: bool,
    first: u32,
    last: u32,
    offset: u64,
    len: u64,
    crc32: u32,
}

impl Block {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.own));
        out.extend_from_slice(&self.first.to_le_bytes());
        out.extend_from_slice(&self.last.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc32.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Block> {
        let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Block {
            own: match b.first()? {
                0 => false,
                1 => true,
                _ => return None,
            },
            first: u32_at(1)?,
            last: u32_at(5)?,
            offset: u64_at(9)?,
            len: u64_at(17)?,
            crc32: u32_at(25)?,
        })
    }

    /// Whether a reader of the groups `range` (all: `None`) needs this block.
    fn wanted(&self, range: &Option<Range<u32>>) -> bool {
        self.own
            || range
                .as_ref()
                .is_none_or(|r| self.first < r.end && self.last >= r.start)
    }
}

/// Writes a run's blocks to `out` (after the magic, which the caller wrote), then its index
/// and trailer ([`BlockWriter::finish`]). Its buffers are kept from block to block.
struct BlockWriter<W: Write> {
    out: W,
    /// Bytes of the run written so far (the magic included).
    at: u64,
    /// The records of the block being written, and what it holds.
    raw: Vec<u8>,
    cur: Option<Block>,
    /// The block compressed.
    packed: Vec<u8>,
    blocks: Vec<Block>,
}

impl<W: Write> BlockWriter<W> {
    fn new(out: W) -> Self {
        BlockWriter {
            out,
            at: MAGIC.len() as u64,
            raw: Vec::new(),
            cur: None,
            packed: Vec::new(),
            blocks: Vec::new(),
        }
    }

    /// Appends a record; records come in (group, key) order, the own fields first.
    fn record(&mut self, kind: u8, group: u32, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        let own = kind == OWN;
        if own || self.raw.len() >= BLOCK_TARGET {
            self.close()?;
        }
        let block = self.cur.get_or_insert(Block {
            own,
            first: group,
            last: group,
            offset: 0,
            len: 0,
            crc32: 0,
        });
        block.last = group;
        record(&mut self.raw, kind, group, key, value)?;
        if own {
            self.close()?;
        }
        Ok(())
    }

    /// Compresses the block being written and writes it out.
    fn close(&mut self) -> std::io::Result<()> {
        let Some(mut block) = self.cur.take() else {
            return Ok(());
        };
        let raw_len = u32::try_from(self.raw.len())
            .map_err(|_| std::io::Error::other("a state block over 4 GiB"))?;
        self.packed.clear();
        self.packed.extend_from_slice(&raw_len.to_le_bytes());
        self.packed.resize(
            4 + lz4_flex::block::get_maximum_output_size(self.raw.len()),
            0,
        );
        let n = lz4_flex::block::compress_into(&self.raw, &mut self.packed[4..])
            .map_err(std::io::Error::other)?;
        self.packed.truncate(4 + n);
        self.out.write_all(&self.packed)?;
        block.offset = self.at;
        block.len = self.packed.len() as u64;
        block.crc32 = crc32fast::hash(&self.packed);
        self.at += block.len;
        self.blocks.push(block);
        self.raw.clear();
        Ok(())
    }

    /// Ends the last block and writes the index and the trailer; returns the sink and the
    /// index's CRC-32.
    fn finish(mut self) -> std::io::Result<(W, u32)> {
        self.close()?;
        let mut index = Vec::with_capacity(4 + self.blocks.len() * INDEX_LINE);
        index.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        for b in &self.blocks {
            b.encode(&mut index);
        }
        let crc = crc32fast::hash(&index);
        let len = u32::try_from(index.len())
            .map_err(|_| std::io::Error::other("a run's index over 4 GiB"))?;
        let mut trailer = [0u8; TRAILER];
        trailer[..8].copy_from_slice(&self.at.to_le_bytes());
        trailer[8..12].copy_from_slice(&len.to_le_bytes());
        trailer[12..16].copy_from_slice(&crc.to_le_bytes());
        trailer[16..].copy_from_slice(INDEX_MAGIC);
        self.out.write_all(&index)?;
        self.out.write_all(&trailer)?;
        Ok((self.out, crc))
    }
}

/// The order in which `delta`'s entries are written: sorted by (key group, encoded key), of
/// a key written twice only the last.
fn sorted(delta: &KeyedDelta) -> Vec<usize> {
    let key = |i: usize| {
        let e = &delta.index[i];
        (e.group, &delta.bytes[e.key.0 as usize..e.key.1 as usize])
    };
    // Sorted by (group, the key's first 8 bytes as a number, its length) first: integer
    // comparisons, which decide the order of (group, key bytes) for keys of at most 8 bytes
    // (a shorter key padded with zeros sorts first, as its bytes do); the bytes only on a tie
    // of longer keys; then by position, so that of a key written twice the later stays later.
    let prefix = |k: &[u8]| {
        let mut b = [0u8; 8];
        let n = k.len().min(8);
        b[..n].copy_from_slice(&k[..n]);
        u64::from_be_bytes(b)
    };
    let mut order: Vec<(u32, u64, u32, u32)> = (0..delta.index.len())
        .map(|i| {
            let (g, k) = key(i);
            (g, prefix(k), k.len() as u32, i as u32)
        })
        .collect();
    let short = |a: &(u32, u64, u32, u32), b: &(u32, u64, u32, u32)| a.2 <= 8 && b.2 <= 8;
    order.sort_unstable_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| {
                if short(a, b) {
                    a.2.cmp(&b.2)
                } else {
                    key(a.3 as usize).1.cmp(key(b.3 as usize).1)
                }
            })
            .then(a.3.cmp(&b.3))
    });
    let same = |a: &(u32, u64, u32, u32), b: &(u32, u64, u32, u32)| {
        (a.0, a.1, a.2) == (b.0, b.1, b.2)
            && (short(a, b) || key(a.3 as usize).1 == key(b.3 as usize).1)
    };
    let mut kept = Vec::with_capacity(order.len());
    for (n, o) in order.iter().enumerate() {
        if order.get(n + 1).is_none_or(|next| !same(o, next)) {
            kept.push(o.3 as usize);
        }
    }
    kept
}

/// Writes the records of `delta` to `out`: its own fields first, then its entries in order.
fn write_records<W: Write>(delta: &KeyedDelta, out: &mut BlockWriter<W>) -> std::io::Result<()> {
    if let Some(own) = &delta.own {
        out.record(OWN, 0, &[], own)?;
    }
    for i in sorted(delta) {
        let e = &delta.index[i];
        let k = &delta.bytes[e.key.0 as usize..e.key.1 as usize];
        match e.entry {
            Some((a, b)) => out.record(ENTRY, e.group, k, &delta.bytes[a as usize..b as usize])?,
            None => out.record(GONE, e.group, k, &[])?,
        }
    }
    Ok(())
}

/// The run of `delta`, in memory, and its reference (named `run`).
#[cfg(test)]
pub(crate) fn encode(delta: &KeyedDelta) -> (Vec<u8>, RunRef) {
    let mut w = BlockWriter::new(MAGIC.to_vec());
    // Writing to a Vec fails only for entries over 4 GiB, which `KeyedDelta` refuses.
    let _ = write_records(delta, &mut w);
    let (out, crc32) = w.finish().expect("writes to memory");
    let r = RunRef {
        file: "run".into(),
        len: out.len() as u64,
        crc32,
    };
    (out, r)
}

/// Writes `delta` as the run `file` under `root`, durably (streamed to a temporary file,
/// fsynced, renamed, its directory fsynced); returns its reference.
pub(crate) fn write(root: &Path, file: &str, delta: &KeyedDelta) -> Result<RunRef, String> {
    let mut run = RunFile::create(root, file)?;
    write_records(delta, &mut run.w).map_err(|e| run.error(e))?;
    run.finish()
}

/// A run being written: to a temporary file.
struct RunFile {
    path: std::path::PathBuf,
    tmp: std::path::PathBuf,
    file: String,
    w: BlockWriter<BufWriter<File>>,
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
        let mut raw = BufWriter::with_capacity(1 << 16, f);
        raw.write_all(MAGIC).map_err(io)?;
        Ok(RunFile {
            w: BlockWriter::new(raw),
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
        let (w, crc32) = w.finish().map_err(io)?;
        let f = w.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        drop(f);
        std::fs::rename(&tmp, &path).map_err(io)?;
        if let Some(dir) = path.parent() {
            crate::checkpoint::store::sync_dir(dir).map_err(io)?;
        }
        Ok(RunRef { file, len, crc32 })
    }
}

/// Counts and sums what is read through it.
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

impl<R> SummedRead<R> {
    fn new(r: R) -> Self {
        SummedRead {
            r,
            crc: crc32fast::Hasher::new(),
            len: 0,
        }
    }
}

/// What a [`RunReader`] reads from.
enum Source<R: Read> {
    /// A second-format run: its blocks, read one at a time into memory.
    Blocks(R),
    /// A first-format run: one frame over the rest of the file, summed whole.
    Whole(lz4_flex::frame::FrameDecoder<SummedRead<R>>),
}

/// Reads the records of one run (all of them, or those of some key groups and the own
/// fields), checking each block's checksum before it is used, and a first-format run's
/// length and checksum at the end ([`RunReader::check`]).
pub(crate) struct RunReader<R: Read + Seek> {
    src: Source<R>,
    /// Blocks still to read, in order (the second format).
    blocks: std::collections::VecDeque<Block>,
    /// The block being read, decompressed, and where in it.
    block: Vec<u8>,
    at: usize,
    /// A block as it is on disk.
    packed: Vec<u8>,
    /// Only records of these groups (and the own fields) are given.
    range: Option<Range<u32>>,
    ended: bool,
    name: String,
}

impl RunReader<BufReader<File>> {
    /// Opens the run `r` of the job run directory `root` for the records of key groups
    /// `range` (all: `None`), and the operator's own fields: only their blocks are read.
    pub(crate) fn open_range(
        root: &Path,
        r: &RunRef,
        range: Option<Range<u32>>,
    ) -> Result<Self, String> {
        let path = root.join(&r.file);
        let f = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        RunReader::new(BufReader::with_capacity(1 << 16, f), r, range)
    }
}

impl<R: Read + Seek> RunReader<R> {
    fn new(mut r: R, expected: &RunRef, range: Option<Range<u32>>) -> Result<Self, String> {
        let name = expected.file.clone();
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|e| format!("{name} ends early ({e}): the file is truncated"))?;
        let whole = &magic == MAGIC_V1;
        if !whole && &magic != MAGIC {
            return Err(format!("{name} is not a state run of this version"));
        }
        let (src, mut blocks) = if whole {
            let mut raw = SummedRead::new(r);
            raw.crc.update(MAGIC_V1);
            raw.len = MAGIC_V1.len() as u64;
            let src = Source::Whole(lz4_flex::frame::FrameDecoder::new(raw));
            (src, Default::default())
        } else {
            let blocks = read_index(&mut r, expected, &name)?;
            (Source::Blocks(r), blocks)
        };
        blocks.retain(|b| b.wanted(&range));
        Ok(RunReader {
            src,
            blocks,
            block: Vec::new(),
            at: 0,
            packed: Vec::new(),
            range,
            ended: false,
            name,
        })
    }
}

/// Reads and checks the index of a second-format run (`name`, as `expected` references it).
fn read_index<R: Read + Seek>(
    r: &mut R,
    expected: &RunRef,
    name: &str,
) -> Result<std::collections::VecDeque<Block>, String> {
    let corrupted = |what: &str| {
        format!("{name} does not match its checkpoint ({what}): the file is corrupted")
    };
    let io = |e: std::io::Error| {
        format!("{name} cannot be read ({e}): the file is truncated or corrupted")
    };
    let len = r.seek(SeekFrom::End(0)).map_err(io)?;
    if len != expected.len {
        return Err(corrupted(&format!(
            "{len} bytes, the checkpoint says {}",
            expected.len
        )));
    }
    let tail = len
        .checked_sub(TRAILER as u64)
        .filter(|&t| t >= MAGIC.len() as u64)
        .ok_or_else(|| corrupted("too short for its trailer"))?;
    r.seek(SeekFrom::Start(tail)).map_err(io)?;
    let mut trailer = [0u8; TRAILER];
    r.read_exact(&mut trailer).map_err(io)?;
    let word =
        |i: usize| u32::from_le_bytes([trailer[i], trailer[i + 1], trailer[i + 2], trailer[i + 3]]);
    let at = u64::from_le_bytes(trailer[..8].try_into().unwrap_or_default());
    let (index_len, crc) = (word(8), word(12));
    if &trailer[16..] != INDEX_MAGIC || at.checked_add(u64::from(index_len)) != Some(tail) {
        return Err(corrupted("its trailer does not point at its index"));
    }
    if crc != expected.crc32 {
        return Err(corrupted(&format!(
            "index checksum {crc:08x}, the checkpoint says {:08x}",
            expected.crc32
        )));
    }
    r.seek(SeekFrom::Start(at)).map_err(io)?;
    let mut index = vec![0u8; index_len as usize];
    r.read_exact(&mut index).map_err(io)?;
    if crc32fast::hash(&index) != crc {
        return Err(corrupted("its index's checksum"));
    }
    let n = index
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| corrupted("an empty index"))? as usize;
    if index.len() != 4 + n * INDEX_LINE {
        return Err(corrupted("an index of the wrong length"));
    }
    let mut blocks = std::collections::VecDeque::with_capacity(n);
    let mut next = MAGIC.len() as u64;
    for line in index[4..].chunks_exact(INDEX_LINE) {
        let b = Block::decode(line).ok_or_else(|| corrupted("a malformed index line"))?;
        if b.offset != next || b.first > b.last {
            return Err(corrupted("its index's blocks do not follow each other"));
        }
        next = b
            .offset
            .checked_add(b.len)
            .ok_or_else(|| corrupted("a block past the end of the file"))?;
        blocks.push_back(b);
    }
    if next != at {
        return Err(corrupted("its blocks do not end where its index begins"));
    }
    Ok(blocks)
}

impl<R: Read + Seek> RunReader<R> {
    fn corrupted(&self, what: &str) -> String {
        format!(
            "{} cannot be read to its end ({what}): the file is truncated or corrupted",
            self.name
        )
    }

    /// Reads, checks and decompresses the next wanted block; `false` when there is none.
    fn next_block(&mut self) -> Result<bool, String> {
        let Source::Blocks(r) = &mut self.src else {
            return Ok(false);
        };
        let Some(block) = self.blocks.pop_front() else {
            return Ok(false);
        };
        let len = match usize::try_from(block.len) {
            Ok(len) if (4..=u64::from(u32::MAX)).contains(&block.len) => len,
            _ => return Err(self.corrupted(&format!("a block of {} bytes", block.len))),
        };
        self.packed.resize(len, 0);
        let read = r
            .seek(SeekFrom::Start(block.offset))
            .and_then(|_| r.read_exact(&mut self.packed));
        if let Err(e) = read {
            return Err(self.corrupted(&e.to_string()));
        }
        if crc32fast::hash(&self.packed) != block.crc32 {
            return Err(format!(
                "{}'s block at byte {} does not match its index: the file is corrupted",
                self.name, block.offset
            ));
        }
        let raw_len = u32::from_le_bytes([
            self.packed[0],
            self.packed[1],
            self.packed[2],
            self.packed[3],
        ]) as usize;
        // LZ4 expands at most about 255 times: a larger length is a damaged block, not an
        // allocation to try.
        if raw_len > (len - 4).saturating_mul(255).max(64) {
            return Err(format!(
                "{}'s block at byte {} says it holds {raw_len} bytes: the file is corrupted",
                self.name, block.offset
            ));
        }
        self.block.resize(raw_len, 0);
        match lz4_flex::block::decompress_into(&self.packed[4..], &mut self.block) {
            Ok(n) if n == raw_len => {}
            _ => {
                return Err(format!(
                "{}'s block at byte {} does not decompress to its length: the file is corrupted",
                self.name, block.offset
            ))
            }
        }
        self.at = 0;
        Ok(true)
    }

    /// Reads the next record into `rec`; `false` at the end of the run (or of the blocks
    /// wanted).
    pub(crate) fn next(&mut self, rec: &mut Record) -> Result<bool, String> {
        loop {
            if self.ended {
                return Ok(false);
            }
            let got = match &self.src {
                Source::Whole(_) => self.next_whole(rec)?,
                Source::Blocks(_) => {
                    if self.at == self.block.len() && !self.next_block()? {
                        false
                    } else {
                        self.next_in_block(rec)?;
                        true
                    }
                }
            };
            if !got {
                self.ended = true;
                return Ok(false);
            }
            let wanted =
                rec.kind == OWN || self.range.as_ref().is_none_or(|r| r.contains(&rec.group));
            if wanted {
                return Ok(true);
            }
        }
    }

    /// The next record of the block in memory.
    fn next_in_block(&mut self, rec: &mut Record) -> Result<(), String> {
        let b = &self.block[self.at..];
        let head = b
            .get(..13)
            .and_then(|h| <[u8; 13]>::try_from(h).ok())
            .ok_or_else(|| self.corrupted("a block ends inside a record"))?;
        let (kind, group, klen, vlen) = record_head(&head);
        if !matches!(kind, ENTRY | GONE | OWN) || b.len() < 13 + klen + vlen {
            return Err(format!(
                "{} holds a malformed record: the file is corrupted",
                self.name
            ));
        }
        rec.kind = kind;
        rec.group = group;
        rec.key.clear();
        rec.key.extend_from_slice(&b[13..13 + klen]);
        rec.value.clear();
        rec.value.extend_from_slice(&b[13 + klen..13 + klen + vlen]);
        self.at += 13 + klen + vlen;
        Ok(())
    }

    /// The next record of a first-format run; `false` at its end.
    fn next_whole(&mut self, rec: &mut Record) -> Result<bool, String> {
        let mut head = [0u8; 13];
        self.fill(&mut head)?;
        let klen;
        let vlen;
        (rec.kind, rec.group, klen, vlen) = record_head(&head);
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
        Ok(rec.kind != END)
    }

    fn fill(&mut self, buf: &mut [u8]) -> Result<(), String> {
        let Source::Whole(r) = &mut self.src else {
            return Err(self.corrupted("not a first-format run"));
        };
        r.read_exact(buf).map_err(|e| {
            format!(
                "{} cannot be read to its end ({e}): the file is truncated or corrupted",
                self.name
            )
        })
    }

    /// Checks that the run ended where and as `expected` says (its blocks were checked as
    /// they were read; a first-format run is checked whole here).
    pub(crate) fn check(self, expected: &RunRef) -> Result<(), String> {
        let Source::Whole(mut frame) = self.src else {
            return if self.ended {
                Ok(())
            } else {
                Err(format!("{} was not read to its end", self.name))
            };
        };
        let mut rest = Vec::new();
        let frame_rest = frame.read_to_end(&mut rest);
        let mut raw = frame.into_inner();
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

#[cfg(test)]
mod tests;
