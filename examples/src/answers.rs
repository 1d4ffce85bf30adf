//! Answer cleaning: the ETL job of the BQBS paper.
//!
//! Input records are answers of a Q&A site, one JSON object per line ([`Answer`]). The job
//! attaches the current *level thresholds* (a small broadcast side: `likes >= 10` is `L1`, ...)
//! to every line, parses it, gives it the level of the largest threshold its likes reach, drops
//! answers with empty or spam content, and writes `id,user_id,likes,level` lines.
//!
//! The graph, with the stable uid of every operator (faults are injected by uid):
//!
//! ```text
//! source ──────────────┐ (forward)
//!                      ├─> connect ─> flat_map ─> split ─> filter ─> map ─> sink
//! levels ─(broadcast)──┘                            └─(malformed)─> malformed
//! ```
//!
//! - `source`: raw lines (`String`) from a file or directory, or generated ([`answer_json`]).
//! - `levels`: the thresholds ([`LevelThreshold`]) from a JSON Lines file or the built-in
//!   [`default_levels`]; parallelism 1, broadcast to every `connect` subtask.
//! - `connect`: [`Attach`] keeps the thresholds as broadcast state (sorted by `min_likes`, read
//!   completely before the first line: `broadcast_first`) and emits each line with them
//!   ([`Tagged`]; the thresholds travel as one shared [`Thresholds`] pointer, not a copy).
//! - `flat_map`: parses the line and assigns the level ([`clean_line`]), emitting one
//!   `Result<Cleaned, BadRecord>` per line.
//! - `split`: `Ok` records go on; **a malformed line is never dropped silently**: it goes, as
//!   a [`BadRecord`] with the line and the parse error, to the side output, which the
//!   `malformed` sink writes as JSON Lines to `part-malformed-<subtask>` in the output
//!   directory (and the job summary counts). A line is malformed when it is not a JSON
//!   [`Answer`], or when its likes are below every threshold (no level applies).
//! - `filter`: drops answers whose content is empty after trimming or starts with `[spam]`
//!   ([`ContentFlag`]).
//! - `map`: formats `id,user_id,likes,level` (e.g. `42,36972,390,L2`) and counts records per
//!   level ([`LevelCounts`]).
//! - `sink`: writes the lines to `part-sink-<subtask>` in the output directory.
//!
//! Everything after `connect` is chained into the `connect` actor (one actor per subtask), so
//! a record crosses one channel: from its `source` subtask to its `connect` subtask.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use weir::{
    BroadcastProcessFunction, Collector, Data, DataStream, Env, JobResult, Operator,
    ProcessFunction,
};

use crate::rng::SplitMix64;

/// The stable uids of the job's operators.
pub mod uid {
    /// The answer lines.
    pub const SOURCE: &str = "source";
    /// The level thresholds.
    pub const LEVELS: &str = "levels";
    /// Attaches the thresholds to every line (broadcast state).
    pub const CONNECT: &str = "connect";
    /// Parses and assigns the level.
    pub const FLAT_MAP: &str = "flat_map";
    /// Routes malformed lines to the side output.
    pub const SPLIT: &str = "split";
    /// Drops empty and spam answers.
    pub const FILTER: &str = "filter";
    /// Formats the output line.
    pub const MAP: &str = "map";
    /// Writes the output lines.
    pub const SINK: &str = "sink";
    /// Writes the malformed lines.
    pub const MALFORMED: &str = "malformed";
}

/// The seed of the generated input when none is given.
pub const DEFAULT_SEED: u64 = 0;

// ---------------------------------------------------------------------------------------------
// Domain types
// ---------------------------------------------------------------------------------------------

/// The author of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// User id.
    pub id: u64,
    /// Display name.
    pub name: String,
    /// Number of followers.
    pub followers: u64,
}

/// One answer, as one line of the input.
///
/// ```
/// let a = weir_examples::answers::parse_answer(
///     r#"{"id":1,"ts_ms":2,"user":{"id":3,"name":"u","followers":0},"question_id":4,
///        "likes":5,"favorites":0,"comments":0,"content":"hi"}"#,
/// ).unwrap();
/// assert_eq!((a.id, a.user.id, a.likes, a.content.as_str()), (1, 3, 5, "hi"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// Answer id.
    pub id: u64,
    /// When it was posted (ms since the epoch).
    pub ts_ms: u64,
    /// Its author.
    pub user: User,
    /// The question it answers.
    pub question_id: u64,
    /// Likes.
    pub likes: u64,
    /// Favorites.
    pub favorites: u64,
    /// Comments.
    pub comments: u64,
    /// The text.
    pub content: String,
}

/// Parses one input line.
pub fn parse_answer(line: &str) -> Result<Answer, serde_json::Error> {
    serde_json::from_str(line)
}

/// The same fields as [`Answer`], borrowing the strings from the line when they have no
/// escapes: what the job parses (the same validation as [`Answer`], no allocation).
#[derive(Deserialize)]
struct AnswerRef<'a> {
    id: u64,
    #[allow(dead_code)]
    ts_ms: u64,
    #[serde(borrow)]
    user: UserRef<'a>,
    #[allow(dead_code)]
    question_id: u64,
    likes: u64,
    #[allow(dead_code)]
    favorites: u64,
    #[allow(dead_code)]
    comments: u64,
    #[serde(borrow)]
    content: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
struct UserRef<'a> {
    id: u64,
    #[serde(borrow)]
    #[allow(dead_code)]
    name: std::borrow::Cow<'a, str>,
    #[allow(dead_code)]
    followers: u64,
}

/// A level name such as `L2`: up to [`LevelName::MAX_LEN`] bytes stored inline, so it is
/// `Copy` and a cleaned record needs no allocation.
///
/// ```
/// use weir_examples::answers::LevelName;
/// let l = LevelName::new("L3").unwrap();
/// assert_eq!(l.as_str(), "L3");
/// assert_eq!(l.to_string(), "L3");
/// assert!(LevelName::new("a-name-that-is-too-long").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LevelName {
    len: u8,
    bytes: [u8; LevelName::MAX_LEN],
}

impl LevelName {
    /// The longest name, in bytes.
    pub const MAX_LEN: usize = 15;

    /// The name `s`, if it fits.
    pub fn new(s: &str) -> Result<Self, String> {
        if s.len() > Self::MAX_LEN {
            return Err(format!(
                "level name `{s}` is longer than {} bytes",
                Self::MAX_LEN
            ));
        }
        let mut bytes = [0u8; Self::MAX_LEN];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(LevelName {
            len: s.len() as u8,
            bytes,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Always valid: the bytes were copied from a `&str`.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Display for LevelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for LevelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for LevelName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LevelName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = LevelName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a level name of at most {} bytes", LevelName::MAX_LEN)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LevelName, E> {
                LevelName::new(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// One line of the levels file: answers with at least `min_likes` likes have (at least)
/// `level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelThreshold {
    /// The least number of likes of the level.
    pub min_likes: u64,
    /// Its name.
    pub level: LevelName,
}

impl LevelThreshold {
    /// A threshold (panics if `level` is longer than [`LevelName::MAX_LEN`]).
    pub fn new(min_likes: u64, level: &str) -> Self {
        LevelThreshold {
            min_likes,
            level: LevelName::new(level).expect("a short level name"),
        }
    }
}

/// The built-in thresholds (those of `tests/data/levels.jsonl`): 0 → `L0`, 10 → `L1`,
/// 100 → `L2`, 1000 → `L3`, 10000 → `L4`.
pub fn default_levels() -> Vec<LevelThreshold> {
    [
        (0, "L0"),
        (10, "L1"),
        (100, "L2"),
        (1000, "L3"),
        (10_000, "L4"),
    ]
    .into_iter()
    .map(|(m, l)| LevelThreshold::new(m, l))
    .collect()
}

/// The level thresholds, sorted by `min_likes` (one per value), shared behind an `Arc`: every
/// record carries one, and cloning it is one reference-count increment.
///
/// It is the broadcast state of [`Attach`], which replaces it (copy on write) when a threshold
/// arrives. Serialized as a JSON array of thresholds.
///
/// ```
/// use weir_examples::answers::{default_levels, Thresholds};
/// let t = Thresholds::from_vec(default_levels());
/// assert_eq!(t.level_of(0).unwrap().as_str(), "L0");
/// assert_eq!(t.level_of(99).unwrap().as_str(), "L1");
/// assert_eq!(t.level_of(100).unwrap().as_str(), "L2");
/// assert_eq!(t.level_of(1_000_000).unwrap().as_str(), "L4");
/// assert!(Thresholds::default().level_of(5).is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds(Arc<[LevelThreshold]>);

impl Thresholds {
    /// Thresholds from any list: sorted; of several with the same `min_likes`, the last wins.
    pub fn from_vec(list: Vec<LevelThreshold>) -> Self {
        let mut sorted: Vec<LevelThreshold> = Vec::with_capacity(list.len());
        for t in list {
            insert_sorted(&mut sorted, t);
        }
        Thresholds(sorted.into())
    }

    /// These thresholds with `t` added (or replacing the one with the same `min_likes`).
    pub fn with(&self, t: LevelThreshold) -> Self {
        let mut v = self.0.to_vec();
        insert_sorted(&mut v, t);
        Thresholds(v.into())
    }

    /// The thresholds, by increasing `min_likes`.
    pub fn as_slice(&self) -> &[LevelThreshold] {
        &self.0
    }

    /// The level of the largest threshold `likes` reaches; `None` if it reaches none.
    #[inline]
    pub fn level_of(&self, likes: u64) -> Option<LevelName> {
        let n = self.0.partition_point(|t| t.min_likes <= likes);
        n.checked_sub(1).map(|i| self.0[i].level)
    }
}

fn insert_sorted(v: &mut Vec<LevelThreshold>, t: LevelThreshold) {
    match v.binary_search_by_key(&t.min_likes, |x| x.min_likes) {
        Ok(i) => v[i] = t,
        Err(i) => v.insert(i, t),
    }
}

impl Serialize for Thresholds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for Thresholds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<LevelThreshold>::deserialize(d).map(Thresholds::from_vec)
    }
}

/// A raw line (or any main-input record `L`) with the thresholds current when it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tagged<L = String> {
    /// The record.
    pub line: L,
    /// The thresholds.
    pub levels: Thresholds,
}

/// The `connect` operator: keeps the thresholds as broadcast state and tags every main record
/// with them.
///
/// ```
/// use weir::Env;
/// use weir_examples::answers::{default_levels, Attach, Tagged};
/// let env = Env::new();
/// let levels = env.from_collection(default_levels());
/// let out = env
///     .from_collection(vec!["a".to_string()])
///     .connect_broadcast(levels)
///     .broadcast_first()
///     .process(Attach)
///     .collect();
/// env.execute("attach-doc").unwrap();
/// let tagged: Vec<Tagged> = out.take();
/// assert_eq!(tagged[0].levels.as_slice().len(), 5);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Attach;

impl<L: Data> BroadcastProcessFunction<L, LevelThreshold, Tagged<L>> for Attach {
    type State = Thresholds;

    #[inline]
    fn process_element(&mut self, line: L, levels: &Thresholds, out: &mut Collector<Tagged<L>>) {
        out.collect(Tagged {
            line,
            levels: levels.clone(),
        });
    }

    fn process_broadcast(
        &mut self,
        t: LevelThreshold,
        levels: &mut Thresholds,
        _out: &mut Collector<Tagged<L>>,
    ) {
        *levels = levels.with(t);
    }
}

/// Why an answer is kept or dropped by the `filter` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ContentFlag {
    /// Real content: kept.
    Ok,
    /// Empty or only white space: dropped.
    Empty,
    /// Starts (after leading white space) with `[spam]`: dropped.
    Spam,
}

/// The flag of `content`.
///
/// ```
/// use weir_examples::answers::{content_flag, ContentFlag};
/// assert_eq!(content_flag(" \t"), ContentFlag::Empty);
/// assert_eq!(content_flag("[spam] buy"), ContentFlag::Spam);
/// assert_eq!(content_flag("an answer about [spam]"), ContentFlag::Ok);
/// ```
#[inline]
pub fn content_flag(content: &str) -> ContentFlag {
    let t = content.trim();
    if t.is_empty() {
        ContentFlag::Empty
    } else if t.starts_with("[spam]") {
        ContentFlag::Spam
    } else {
        ContentFlag::Ok
    }
}

/// A parsed answer with its level: what `flat_map` emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleaned {
    /// Answer id.
    pub id: u64,
    /// Author id.
    pub user_id: u64,
    /// Likes.
    pub likes: u64,
    /// The level its likes reach.
    pub level: LevelName,
    /// Whether its content is kept.
    pub content_flag: ContentFlag,
}

impl Cleaned {
    /// Whether the `filter` operator keeps it.
    #[inline]
    pub fn is_kept(&self) -> bool {
        self.content_flag == ContentFlag::Ok
    }
}

/// The output line: `id,user_id,likes,level`.
///
/// ```
/// use weir_examples::answers::{Cleaned, ContentFlag, LevelName};
/// let c = Cleaned { id: 42, user_id: 36972, likes: 390, level: LevelName::new("L2").unwrap(),
///                   content_flag: ContentFlag::Ok };
/// assert_eq!(c.to_string(), "42,36972,390,L2");
/// ```
impl fmt::Display for Cleaned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{}",
            self.id, self.user_id, self.likes, self.level
        )
    }
}

/// Formats the output line of `c` (what the `map` operator emits).
#[inline]
pub fn format_cleaned(c: &Cleaned) -> String {
    let mut s = String::with_capacity(48);
    let _ = write!(s, "{c}");
    s
}

/// A line that is not a valid answer, with the reason: the side output of `split`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRecord {
    /// The line as read.
    pub line: String,
    /// Why it was refused.
    pub error: String,
}

/// Assigns the level of an answer with `likes` and `content`: `Err` if no threshold applies.
#[inline]
fn cleaned(
    id: u64,
    user_id: u64,
    likes: u64,
    content: &str,
    levels: &Thresholds,
) -> Result<Cleaned, String> {
    let level = levels.level_of(likes).ok_or_else(|| {
        format!(
            "{likes} likes are below every level threshold (lowest: {:?})",
            levels.as_slice().first().map(|t| t.min_likes)
        )
    })?;
    Ok(Cleaned {
        id,
        user_id,
        likes,
        level,
        content_flag: content_flag(content),
    })
}

/// Cleans a parsed answer.
pub fn clean(answer: &Answer, levels: &Thresholds) -> Result<Cleaned, String> {
    cleaned(
        answer.id,
        answer.user.id,
        answer.likes,
        &answer.content,
        levels,
    )
}

/// The `flat_map` step: parses `line` and assigns its level. A line that is not an
/// [`Answer`], or whose likes are below every threshold, becomes a [`BadRecord`].
///
/// ```
/// use weir_examples::answers::{clean_line, default_levels, Thresholds};
/// let levels = Thresholds::from_vec(default_levels());
/// let line = r#"{"id":42,"ts_ms":0,"user":{"id":36972,"name":"u","followers":1},
///   "question_id":1,"likes":390,"favorites":0,"comments":0,"content":"checkpoint"}"#;
/// assert_eq!(clean_line(line.to_string(), &levels).unwrap().to_string(), "42,36972,390,L2");
/// let bad = clean_line("{not json".to_string(), &levels).unwrap_err();
/// assert_eq!(bad.line, "{not json");
/// ```
#[inline]
pub fn clean_line(line: String, levels: &Thresholds) -> Result<Cleaned, BadRecord> {
    let r = match serde_json::from_str::<AnswerRef<'_>>(&line) {
        Ok(a) => cleaned(a.id, a.user.id, a.likes, &a.content, levels),
        Err(e) => Err(e.to_string()),
    };
    r.map_err(|error| BadRecord { line, error })
}

// ---------------------------------------------------------------------------------------------
// Generated input
// ---------------------------------------------------------------------------------------------

const WORDS: &[&str] = &[
    "stream",
    "batch",
    "checkpoint",
    "watermark",
    "latency",
    "throughput",
    "state",
    "key",
    "window",
    "join",
    "map",
    "reduce",
    "filter",
    "sink",
    "source",
    "barrier",
    "snapshot",
    "restore",
    "kernel",
    "thread",
    "pool",
    "queue",
    "async",
    "tokio",
    "rust",
    "flink",
    "actor",
    "record",
    "event",
    "time",
    "question",
    "answer",
    "user",
    "vote",
    "like",
    "test",
    "build",
    "compile",
];

/// Appends `n` as decimal digits.
#[inline]
fn push_u64(s: &mut String, n: u64) {
    let _ = write!(s, "{n}");
}

/// The JSON line (without newline) of generated answer `index` of the stream `seed`.
///
/// Deterministic in `(seed, index)`. About 2.5% of answers have empty content and 2.5% start
/// with `[spam]`; likes are spread over all five default levels (about 50% `L0`, 30% `L1`,
/// 13% `L2`, 5.5% `L3`, 1.5% `L4`); content is 50 to 200 characters of words.
///
/// ```
/// use weir_examples::answers::{answer_json, parse_answer};
/// let a = parse_answer(&answer_json(7, 3)).unwrap();
/// assert_eq!(a.id, 3);
/// assert_eq!(answer_json(7, 3), answer_json(7, 3));
/// ```
pub fn answer_json(seed: u64, index: u64) -> String {
    let mut r = SplitMix64::for_item(seed, index);
    let ts = 1_700_000_000_000 + index * 10 + r.below(10);
    let user = r.below(100_000);
    let u = r.unit();
    let followers = (u * u * u * 50_000.0) as u64;
    let question = r.below(1_000_000);
    let likes = match r.below(1000) {
        0..=499 => r.below(10),
        500..=799 => r.range(10, 100),
        800..=929 => r.range(100, 1000),
        930..=984 => r.range(1000, 10_000),
        _ => r.range(10_000, 100_000),
    };
    let favorites = likes / r.range(2, 12) + r.below(3);
    let comments = r.below(50);
    let kind = r.below(1000);
    let mut s = String::with_capacity(360);
    s.push_str("{\"id\":");
    push_u64(&mut s, index);
    s.push_str(",\"ts_ms\":");
    push_u64(&mut s, ts);
    s.push_str(",\"user\":{\"id\":");
    push_u64(&mut s, user);
    s.push_str(",\"name\":\"user");
    push_u64(&mut s, user);
    s.push_str("\",\"followers\":");
    push_u64(&mut s, followers);
    s.push_str("},\"question_id\":");
    push_u64(&mut s, question);
    s.push_str(",\"likes\":");
    push_u64(&mut s, likes);
    s.push_str(",\"favorites\":");
    push_u64(&mut s, favorites);
    s.push_str(",\"comments\":");
    push_u64(&mut s, comments);
    s.push_str(",\"content\":\"");
    if kind >= 25 {
        let start = s.len();
        if kind < 50 {
            s.push_str("[spam] ");
        }
        let target = 50 + r.below(151) as usize;
        while s.len() - start < target {
            if s.len() > start && !s.ends_with(' ') {
                s.push(' ');
            }
            s.push_str(WORDS[r.below(WORDS.len() as u64) as usize]);
        }
    }
    s.push_str("\"}");
    s
}

/// Writes `records` generated answers (seed `seed`) to `path`, one per line.
pub fn write_answers(path: &Path, records: u64, seed: u64) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    for i in 0..records {
        w.write_all(answer_json(seed, i).as_bytes())?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

// ---------------------------------------------------------------------------------------------
// Counting records per level
// ---------------------------------------------------------------------------------------------

const SLOT_LEVELS: usize = 64;

/// One `map` subtask's counts: only that subtask writes them (no contention).
#[derive(Debug)]
struct Slot {
    names: Mutex<Vec<LevelName>>,
    counts: Vec<AtomicU64>,
}

/// Records per level, counted by the `map` operator of a job; read after the job.
#[derive(Debug, Clone, Default)]
pub struct LevelCounts {
    slots: Arc<Mutex<Vec<Arc<Slot>>>>,
}

impl LevelCounts {
    /// A counter with a slot of its own (so one per subtask: cloning makes a new one).
    pub fn counter(&self) -> LevelCounter {
        let slot = Arc::new(Slot {
            names: Mutex::new(Vec::new()),
            counts: (0..=SLOT_LEVELS).map(|_| AtomicU64::new(0)).collect(),
        });
        lock(&self.slots).push(slot.clone());
        LevelCounter {
            counts: self.clone(),
            slot,
            names: Vec::new(),
        }
    }

    /// Records per level name over every subtask (names beyond the 64th distinct one of a
    /// subtask are counted as `(other)`).
    pub fn totals(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for slot in lock(&self.slots).iter() {
            let names = lock(&slot.names);
            for (i, c) in slot.counts.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let name = names
                    .get(i)
                    .map(|l| l.as_str().to_owned())
                    .unwrap_or_else(|| "(other)".to_owned());
                *m.entry(name).or_insert(0) += n;
            }
        }
        m
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts records per level for one subtask: an uncontended relaxed atomic add per record.
/// Cloning it (as the framework does per subtask) registers a new slot.
#[derive(Debug)]
pub struct LevelCounter {
    counts: LevelCounts,
    slot: Arc<Slot>,
    /// The slot's names, read without the lock.
    names: Vec<LevelName>,
}

impl Clone for LevelCounter {
    fn clone(&self) -> Self {
        self.counts.counter()
    }
}

impl LevelCounter {
    /// Counts one record of `level`.
    #[inline]
    pub fn add(&mut self, level: LevelName) {
        let i = match self.names.iter().position(|n| *n == level) {
            Some(i) => i,
            None if self.names.len() < SLOT_LEVELS => {
                self.names.push(level);
                lock(&self.slot.names).push(level);
                self.names.len() - 1
            }
            None => SLOT_LEVELS,
        };
        self.slot.counts[i].fetch_add(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------------
// The job
// ---------------------------------------------------------------------------------------------

/// Where the answers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answers {
    /// `records` generated answers ([`answer_json`]) of stream `seed`.
    Generated {
        /// How many.
        records: u64,
        /// Which stream.
        seed: u64,
    },
    /// The lines of a file, or of a directory's files.
    Lines(PathBuf),
}

/// Where the thresholds come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Levels {
    /// [`default_levels`].
    #[default]
    Builtin,
    /// A JSON Lines file of [`LevelThreshold`]s (a malformed line fails the job).
    File(PathBuf),
}

/// The inputs of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The answers.
    pub answers: Answers,
    /// The thresholds.
    pub levels: Levels,
}

impl Input {
    /// `records` generated answers of stream `seed`, built-in thresholds.
    pub fn generated(records: u64, seed: u64) -> Self {
        Input {
            answers: Answers::Generated { records, seed },
            levels: Levels::Builtin,
        }
    }

    /// The answers of a file or directory, built-in thresholds.
    pub fn lines(path: impl Into<PathBuf>) -> Self {
        Input {
            answers: Answers::Lines(path.into()),
            levels: Levels::Builtin,
        }
    }

    /// With the thresholds of a levels file.
    pub fn with_levels(mut self, path: impl Into<PathBuf>) -> Self {
        self.levels = Levels::File(path.into());
        self
    }
}

/// What the caller keeps of a built job.
#[derive(Debug, Clone)]
pub struct CleaningHandles {
    /// Records per level, filled by the `map` operator.
    pub level_counts: LevelCounts,
    /// Where the `sink` and `malformed` part files go.
    pub out_dir: PathBuf,
}

/// The `levels` operator: the thresholds stream, parallelism 1.
pub fn levels_stream(env: &Env, levels: &Levels) -> DataStream<LevelThreshold> {
    let s = match levels {
        Levels::Builtin => env.from_collection(default_levels()),
        Levels::File(path) => env.read_jsonl::<LevelThreshold>(path),
    };
    s.uid(uid::LEVELS).name("levels").set_parallelism(1)
}

/// The answer-cleaning job up to its sinks: every operator but `map` and the sinks, at
/// `parallelism` (`levels` at 1). Returns the answers the `filter` keeps and the lines that did
/// not parse. [`build_answer_cleaning`] adds the `map` and file sinks; benchmarks add their own.
pub fn cleaning_streams(
    env: &Env,
    input: &Input,
    parallelism: usize,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    cleaning_streams_with(env, input, parallelism, |tagged| {
        tagged.apply(ParseAndLevel::default())
    })
}

/// [`cleaning_streams`] with the `flat_map` operator that `parse` applies to the tagged lines
/// (benchmarks wrap [`ParseAndLevel`] to inject faults, or back it up). Its uid, name and
/// parallelism are set here.
pub fn cleaning_streams_with(
    env: &Env,
    input: &Input,
    parallelism: usize,
    parse: impl FnOnce(DataStream<Tagged>) -> DataStream<Result<Cleaned, BadRecord>>,
) -> (DataStream<Cleaned>, DataStream<BadRecord>) {
    let p = parallelism;
    // ANCHOR: graph
    // The thresholds: one subtask, broadcast to every `connect` subtask. (Made first: subtasks
    // are dealt to arbiter threads round robin in graph order, so `source` and `connect` do
    // not share a thread when there are two.)
    let levels = levels_stream(env, &input.levels);
    // The answers: raw JSON lines, generated or read from files.
    let lines: DataStream<String> = match &input.answers {
        Answers::Generated { records, seed } => {
            let seed = *seed;
            env.generate(*records, move |i| answer_json(seed, i))
        }
        Answers::Lines(path) => env.read_lines(path),
    };
    let lines = lines.uid(uid::SOURCE).set_parallelism(p);
    // Files are dealt to source subtasks whole: spread the lines of fewer files than subtasks.
    let lines = match (&input.answers, p) {
        (Answers::Lines(_), 2..) => lines.rebalance(),
        _ => lines,
    };
    let tagged = lines
        // Every connect subtask reads all the thresholds before its first line.
        .connect_broadcast(levels)
        .broadcast_first()
        .process(Attach)
        .uid(uid::CONNECT)
        .name("connect")
        .set_parallelism(p);
    // Parse and assign the level: one Ok(Cleaned) or Err(BadRecord) per line.
    let (parsed, malformed) = parse(tagged)
        .uid(uid::FLAT_MAP)
        .name("flat_map")
        .set_parallelism(p)
        .split();
    let kept = parsed
        .uid(uid::SPLIT)
        .set_parallelism(p)
        .apply(DropUnwanted::default())
        .uid(uid::FILTER)
        .name("filter")
        .set_parallelism(p);
    // ANCHOR_END: graph
    (kept, malformed)
}

/// Adds the answer-cleaning job to `env`: answers from `input`, lines to
/// `out_dir/part-sink-<subtask>`, malformed lines to `out_dir/part-malformed-<subtask>`, every
/// operator but `levels` at `parallelism`. Run it with `env.execute(..)`.
///
/// ```
/// use weir::Env;
/// use weir_examples::answers::{build_answer_cleaning, read_part_files, uid, Input, Summary};
/// let dir = std::env::temp_dir().join(format!("weir-doc-cleaning-{}", std::process::id()));
/// let env = Env::new();
/// let handles = build_answer_cleaning(&env, &Input::generated(2_000, 1), &dir, 2);
/// let result = env.execute("answer-cleaning-doc").unwrap();
/// let summary = Summary::new(&result, &handles);
/// let lines = read_part_files(&dir, uid::SINK).unwrap();
/// assert_eq!(summary.records_read, 2_000);
/// assert_eq!(lines.len() as u64, summary.written);
/// assert_eq!(summary.written + summary.dropped + summary.malformed, 2_000);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn build_answer_cleaning(
    env: &Env,
    input: &Input,
    out_dir: &Path,
    parallelism: usize,
) -> CleaningHandles {
    let p = parallelism;
    let level_counts = LevelCounts::default();
    let mut counter = level_counts.counter();
    // ANCHOR: pipeline
    let (cleaned, malformed) = cleaning_streams(env, input, p);
    // Malformed lines are kept: a side output, written as JSON Lines.
    malformed
        .write_jsonl(out_dir)
        .uid(uid::MALFORMED)
        .set_parallelism(p);
    cleaned
        .map(move |c: Cleaned| {
            counter.add(c.level);
            format_cleaned(&c)
        })
        .uid(uid::MAP)
        .set_parallelism(p)
        .write_text(out_dir)
        .uid(uid::SINK)
        .set_parallelism(p);
    // ANCHOR_END: pipeline
    CleaningHandles {
        level_counts,
        out_dir: out_dir.to_owned(),
    }
}

// ANCHOR: operators
/// The `flat_map` operator: parses each line and assigns its level, one `Ok(Cleaned)` or
/// `Err(BadRecord)` per line. Its counters are operator state: they are snapshotted and
/// restored with the operator.
#[derive(Debug, Clone, Default, Operator)]
#[weir(name = "parse-and-level", version = 1)]
pub struct ParseAndLevel {
    /// Lines parsed.
    #[weir(state)]
    pub parsed: u64,
    /// Lines that did not parse (sent to the side output).
    #[weir(state)]
    pub malformed: u64,
}

impl ProcessFunction<Tagged, Result<Cleaned, BadRecord>> for ParseAndLevel {
    #[inline]
    fn process(&mut self, t: Tagged, out: &mut Collector<Result<Cleaned, BadRecord>>) {
        let r = clean_line(t.line, &t.levels);
        match r {
            Ok(_) => self.parsed += 1,
            Err(_) => self.malformed += 1,
        }
        out.collect(r);
    }
}

/// The `filter` operator: drops empty answers and, while `drop_spam` is on, spam. `drop_spam`
/// can be switched on a running job (`handle.update_config("filter", "drop_spam", "false")`).
#[derive(Debug, Clone, Operator)]
#[weir(name = "drop-unwanted", version = 1)]
pub struct DropUnwanted {
    /// Whether answers starting with `[spam]` are dropped (default true).
    #[weir(config)]
    pub drop_spam: bool,
    /// Answers dropped so far.
    #[weir(state)]
    pub dropped: u64,
}

impl Default for DropUnwanted {
    fn default() -> Self {
        DropUnwanted {
            drop_spam: true,
            dropped: 0,
        }
    }
}

impl ProcessFunction<Cleaned, Cleaned> for DropUnwanted {
    #[inline]
    fn process(&mut self, c: Cleaned, out: &mut Collector<Cleaned>) {
        let keep = match c.content_flag {
            ContentFlag::Ok => true,
            ContentFlag::Spam => !self.drop_spam,
            ContentFlag::Empty => false,
        };
        if keep {
            out.collect(c);
        } else {
            self.dropped += 1;
        }
    }
}
// ANCHOR_END: operators

/// What a run of the job did, from its result and handles.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Lines read by `source`.
    pub records_read: u64,
    /// Lines sent to the side output (`malformed`).
    pub malformed: u64,
    /// Answers dropped by `filter` (empty or spam).
    pub dropped: u64,
    /// Lines written by `sink`.
    pub written: u64,
    /// Written lines per level.
    pub per_level: BTreeMap<String, u64>,
    /// Job wall time in seconds.
    pub seconds: f64,
}

impl Summary {
    /// The summary of a completed job.
    pub fn new(result: &JobResult, handles: &CleaningHandles) -> Self {
        let op = |u: &str| result.operator(u);
        let filter = op(uid::FILTER);
        Summary {
            records_read: op(uid::SOURCE).map_or(0, |o| o.records_out),
            malformed: op(uid::MALFORMED).map_or(0, |o| o.records_in),
            dropped: filter.map_or(0, |o| o.records_in - o.records_out),
            written: op(uid::SINK).map_or(0, |o| o.records_in),
            per_level: handles.level_counts.totals(),
            seconds: result.duration.as_secs_f64(),
        }
    }

    /// Input records per second.
    pub fn records_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records_read as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "records read:   {:>12}", self.records_read)?;
        for (level, n) in &self.per_level {
            writeln!(f, "  level {level:<8}{n:>12}")?;
        }
        writeln!(f, "written:        {:>12}", self.written)?;
        writeln!(
            f,
            "dropped:        {:>12}  (empty or [spam] content)",
            self.dropped
        )?;
        writeln!(f, "malformed:      {:>12}  (side output)", self.malformed)?;
        write!(
            f,
            "time:           {:>12.3} s  ({:.0} records/s)",
            self.seconds,
            self.records_per_sec()
        )
    }
}

/// Makes `dir` and removes the part files an earlier run of this job left there (a run with
/// a higher parallelism leaves more of them).
pub fn prepare_output_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = [uid::SINK, uid::MALFORMED]
            .iter()
            .any(|u| name.starts_with(&format!("part-{u}-")));
        if ours && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Every line of the part files `part-{uid}-*` in `dir` (files in name order).
pub fn read_part_files(dir: &Path, uid: &str) -> std::io::Result<Vec<String>> {
    let prefix = format!("part-{uid}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        for line in std::io::BufReader::new(std::fs::File::open(f)?).lines() {
            lines.push(line?);
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_answers_parse_and_spread_over_levels() {
        let levels = Thresholds::from_vec(default_levels());
        let mut per_level = BTreeMap::new();
        let (mut empty, mut spam) = (0, 0);
        for i in 0..20_000 {
            let line = answer_json(DEFAULT_SEED, i);
            let a = parse_answer(&line).unwrap();
            assert_eq!(a.id, i);
            let len = a.content.len();
            assert!(len == 0 || (50..=215).contains(&len), "{len}");
            let c = clean_line(line, &levels).unwrap();
            assert_eq!(c, clean(&a, &levels).unwrap());
            *per_level.entry(c.level.to_string()).or_insert(0u64) += 1;
            match c.content_flag {
                ContentFlag::Empty => empty += 1,
                ContentFlag::Spam => spam += 1,
                ContentFlag::Ok => {}
            }
        }
        assert_eq!(per_level.len(), 5, "{per_level:?}");
        assert!(per_level.values().all(|&n| n > 100), "{per_level:?}");
        assert!((300..700).contains(&empty), "{empty}");
        assert!((300..700).contains(&spam), "{spam}");
    }

    #[test]
    fn thresholds_sort_and_replace() {
        let t = Thresholds::from_vec(vec![
            LevelThreshold::new(100, "B"),
            LevelThreshold::new(0, "A"),
            LevelThreshold::new(100, "C"),
        ]);
        assert_eq!(
            t.as_slice(),
            &[LevelThreshold::new(0, "A"), LevelThreshold::new(100, "C")]
        );
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Thresholds>(&json).unwrap(), t);
        let t2: LevelThreshold = serde_json::from_str(r#"{"min_likes":10,"level":"L1"}"#).unwrap();
        assert_eq!(t2, LevelThreshold::new(10, "L1"));
    }

    #[test]
    fn likes_below_every_threshold_is_a_bad_record() {
        let levels = Thresholds::from_vec(vec![LevelThreshold::new(10, "L1")]);
        let line = r#"{"id":1,"ts_ms":0,"user":{"id":2,"name":"u","followers":0},"question_id":3,"likes":3,"favorites":0,"comments":0,"content":"x"}"#;
        let bad = clean_line(line.to_string(), &levels).unwrap_err();
        assert!(
            bad.error.contains("below every level threshold"),
            "{}",
            bad.error
        );
        assert_eq!(bad.line, line);
    }

    #[test]
    fn counters_are_per_clone() {
        let counts = LevelCounts::default();
        let mut a = counts.counter();
        let mut b = a.clone();
        let (l0, l1) = (LevelName::new("L0").unwrap(), LevelName::new("L1").unwrap());
        a.add(l0);
        a.add(l1);
        b.add(l1);
        let t = counts.totals();
        assert_eq!(t["L0"], 1);
        assert_eq!(t["L1"], 2);
    }
}
