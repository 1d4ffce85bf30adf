//! The expected output of the answer-cleaning job, computed sequentially from its input
//! ([`Expected`]), and the check of what the sink committed against it ([`tally`]).

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::BufRead;
use std::path::Path;

use weir_examples::answers::{
    answer_json, clean_line, default_levels, format_cleaned, Answers, Thresholds,
};
use weir_testing::ExactlyOnce;

/// A kept record of the input.
#[derive(Debug, Clone, Copy)]
pub struct KeptRecord {
    /// 0-based index of the record (non-blank line) in the input.
    pub index: u64,
    /// Its answer id.
    pub id: u64,
    /// Hash of its output line.
    pub line_hash: u64,
}

/// What the job must commit, computed sequentially with the job's functions (`clean_line`
/// with the built-in thresholds, then the `filter` rule `Cleaned::is_kept`, then
/// `format_cleaned`).
#[derive(Debug, Default)]
pub struct Expected {
    /// Records of the input.
    pub records: u64,
    /// The records the `sink` must commit, in input order.
    pub kept: Vec<KeptRecord>,
    /// Records dropped by `filter`.
    pub dropped: u64,
    /// Records sent to the `malformed` side output.
    pub malformed: u64,
}

/// Hash of a line (the same in every run of the program).
pub fn line_hash(line: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut h);
    h.finish()
}

impl Expected {
    fn push(&mut self, index: u64, line: String, levels: &Thresholds) {
        self.records += 1;
        match clean_line(line, levels) {
            Err(_) => self.malformed += 1,
            Ok(c) if !c.is_kept() => self.dropped += 1,
            Ok(c) => self.kept.push(KeptRecord {
                index,
                id: c.id,
                line_hash: line_hash(&format_cleaned(&c)),
            }),
        }
    }

    /// The output of `records` generated answers of stream `seed`.
    pub fn generated(records: u64, seed: u64) -> Self {
        let levels = Thresholds::from_vec(default_levels());
        let mut e = Expected::default();
        for i in 0..records {
            e.push(i, answer_json(seed, i), &levels);
        }
        e
    }

    /// The output of the lines of `path`, read as `read_lines` does (line endings removed,
    /// blank lines passed over, a line that is not UTF-8 is an error).
    pub fn from_file(path: &Path) -> std::io::Result<Self> {
        let levels = Thresholds::from_vec(default_levels());
        let mut e = Expected::default();
        for_each_input_line(path, |index, line| {
            e.push(index, line.to_owned(), &levels);
        })?;
        Ok(e)
    }
}

/// Calls `f(index, line)` for every record of the file `path`, read as `read_lines` does
/// (line endings removed, blank lines passed over, a line that is not UTF-8 is an error);
/// `index` counts records from 0.
pub fn for_each_input_line(path: &Path, mut f: impl FnMut(u64, &str)) -> std::io::Result<()> {
    let mut r = std::io::BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut index = 0u64;
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let mut end = buf.len();
        while end > 0 && matches!(buf[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        if buf[..end].iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = std::str::from_utf8(&buf[..end]).map_err(|err| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {line_no} is not UTF-8: {err}"),
            )
        })?;
        f(index, line);
        index += 1;
    }
    Ok(())
}

/// The input records at `indices` (in that order), and how often each occurs in the whole
/// input (a fault keyed by its line needs a line that occurs once).
pub fn input_lines_at(answers: &Answers, indices: &[u64]) -> std::io::Result<Vec<(String, u64)>> {
    match answers {
        // Every generated answer has its own id.
        Answers::Generated { seed, .. } => Ok(indices
            .iter()
            .map(|&i| (answer_json(*seed, i), 1))
            .collect()),
        Answers::Lines(path) => {
            let mut lines: Vec<Option<String>> = vec![None; indices.len()];
            for_each_input_line(path, |i, line| {
                for (k, &at) in indices.iter().enumerate() {
                    if at == i {
                        lines[k] = Some(line.to_owned());
                    }
                }
            })?;
            let lines: Vec<String> = lines
                .into_iter()
                .zip(indices)
                .map(|(l, i)| {
                    l.ok_or_else(|| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("the input has no record {i}"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut counts = vec![0u64; lines.len()];
            for_each_input_line(path, |_, line| {
                for (k, l) in lines.iter().enumerate() {
                    if l == line {
                        counts[k] += 1;
                    }
                }
            })?;
            Ok(lines.into_iter().zip(counts).collect())
        }
    }
}

/// The committed output compared with the expected one.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Lines committed.
    pub committed: u64,
    /// Extra copies of expected ids (an id committed k times more than expected counts k).
    pub duplicates: u64,
    /// Expected ids not committed (as often as expected).
    pub missing: u64,
    /// Committed lines whose id is not expected at all.
    pub unexpected: u64,
    /// Committed lines that are not an expected line (wrong content), by multiset.
    pub wrong_lines: u64,
    /// Committed lines without a numeric id before the first comma.
    pub unparsable: u64,
    /// Up to 10 duplicated ids, for diagnosis.
    pub duplicate_examples: Vec<u64>,
    /// Up to 10 missing ids, for diagnosis.
    pub missing_examples: Vec<u64>,
}

/// Compares `lines` (committed) with `expected`, with `weir_testing`'s [`ExactlyOnce`]: by
/// answer id (duplicates, missing, unexpected), and by line content (a committed line that is
/// not one of the expected lines, by multiset, is wrong).
pub fn tally(expected: &Expected, lines: &[String]) -> Tally {
    let mut unparsable = 0;
    let ids: Vec<u64> = lines
        .iter()
        .filter_map(|line| {
            let id = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
            unparsable += u64::from(id.is_none());
            id
        })
        .collect();
    let by_id = ExactlyOnce::new(expected.kept.iter().map(|k| k.id)).check(ids);
    let by_line = ExactlyOnce::new(expected.kept.iter().map(|k| k.line_hash))
        .check(lines.iter().map(|l| line_hash(l)));
    Tally {
        committed: lines.len() as u64,
        duplicates: by_id.duplicates,
        missing: by_id.missing,
        unexpected: by_id.unexpected,
        // Extra copies of an expected line, and lines not expected at all.
        wrong_lines: by_line.duplicates + by_line.unexpected,
        unparsable,
        duplicate_examples: by_id.duplicate_ids,
        missing_examples: by_id.missing_ids,
    }
}
