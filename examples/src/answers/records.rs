//! The records of the job: what flows between its operators.
//!
//! Owns the input record ([`Answer`], [`User`], [`parse_answer`]), the level thresholds
//! ([`LevelName`], [`LevelThreshold`], [`default_levels`], [`Thresholds`]), a line tagged with
//! them ([`Tagged`]), and what `flat_map` emits ([`Cleaned`] with its [`ContentFlag`] and
//! output format, or a [`BadRecord`]). It does not parse lines into them or decide levels and
//! flags (`clean`), nor hold the operators (`operators`).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
/// It is the broadcast state of [`Attach`](super::Attach), which replaces it (copy on write)
/// when a threshold arrives. Serialized as a JSON array of thresholds.
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

/// A raw line with where it was read ([`weir::Line`]; or any main-input record `L`) and the
/// thresholds current when it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tagged<L = weir::Line> {
    /// The record.
    pub line: L,
    /// The thresholds.
    pub levels: Thresholds,
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

/// A parsed answer with its level: what `flat_map` emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleaned {
    /// Answer id.
    pub id: u64,
    /// Author id.
    pub user_id: u64,
    /// Likes.
    pub likes: u64,
    /// When it was posted: the answer's `ts_ms` (ms since the epoch), its event time in the
    /// windowed job. Not part of the output line.
    pub ts_ms: u64,
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

/// The output line: `id,user_id,likes,level` (the time is not in it).
///
/// ```
/// use weir_examples::answers::{Cleaned, ContentFlag, LevelName};
/// let c = Cleaned { id: 42, user_id: 36972, likes: 390, ts_ms: 1_700_000_000_420,
///                   level: LevelName::new("L2").unwrap(), content_flag: ContentFlag::Ok };
/// assert_eq!(c.to_string(), "42,36972,390,L2");
/// ```
impl fmt::Display for Cleaned {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The sinks format every output line through this: itoa, not `{}` per integer.
        let mut n = itoa::Buffer::new();
        f.write_str(n.format(self.id))?;
        f.write_str(",")?;
        f.write_str(n.format(self.user_id))?;
        f.write_str(",")?;
        f.write_str(n.format(self.likes))?;
        f.write_str(",")?;
        f.write_str(self.level.as_str())
    }
}

/// A line that is not a valid answer, with the reason and where it was read: the side output
/// of `split` (and, for lines that are not even text, of the source).
///
/// The coordinates are those of the [`weir::Line`] the job read: for file input, the file,
/// 1-based line number and byte offset of the line's first byte; for generated answers, the
/// path `<generated, seed S>`, the answer's index + 1 and offset 0. A record made by
/// [`clean_line`](super::clean_line) from a bare string has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRecord {
    /// The file the line was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its 1-based line number in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_number: Option<u64>,
    /// The offset in the file of its first byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<u64>,
    /// The line as read (lossily decoded if it was not UTF-8; of a line over the maximum
    /// length, its start only).
    pub line: String,
    /// Why it was refused.
    pub error: String,
}

impl BadRecord {
    /// A refused line without coordinates.
    pub fn new(line: String, error: String) -> Self {
        BadRecord {
            path: None,
            line_number: None,
            byte_offset: None,
            line,
            error,
        }
    }

    /// A refused line read at `at`.
    pub fn at(at: &weir::Line, line: String, error: String) -> Self {
        BadRecord {
            path: Some(at.path.to_string()),
            line_number: Some(at.line),
            byte_offset: Some(at.byte_offset),
            line,
            error,
        }
    }
}

/// A line the source could not read as text (too long, a NUL byte, not UTF-8).
impl From<weir::BadLine> for BadRecord {
    fn from(b: weir::BadLine) -> Self {
        BadRecord {
            path: Some(b.path),
            line_number: Some(b.line),
            byte_offset: Some(b.byte_offset),
            line: b.text,
            error: b.error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
