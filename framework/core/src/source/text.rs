//! Shared text: the lines of one source batch copied into one buffer, each record a slice of it.
//!
//! A line source appends the lines of a batch to a [`TextBatch`], then [`shares`]
//! (TextBatch::share) it and gives each record a [`Text`]: the shared buffer and the line's
//! range in it. Moving a batch of lines to another thread then costs one allocation per batch
//! instead of one `String` per line (allocated on one thread, freed on another), and the
//! reader parses straight from the slice (a borrowing `Deserialize` copies nothing).
//!
//! A `Text` keeps its whole batch's buffer alive: a record kept for long (in state, in a
//! window) should keep `text.to_string()` instead. A deserialized `Text` (restored from a
//! checkpoint) has a buffer of its own.
//!
//! ```
//! use weir::source::text::{Text, TextBatch};
//! let mut batch = TextBatch::default();
//! let a = batch.push("first line");
//! let b = batch.push("second");
//! let buf = batch.share();
//! let (a, b) = (Text::new(&buf, a), Text::new(&buf, b));
//! assert_eq!((a.as_str(), &*b), ("first line", "second"));
//! assert_eq!(Text::from("second"), b);
//! ```

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, Range};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Text, as a slice of a buffer shared with the other lines of its batch. Derefs to `str`;
/// compares, hashes, displays and serializes as its `str`.
#[derive(Clone)]
pub struct Text {
    buf: Arc<String>,
    start: usize,
    end: usize,
}

impl Text {
    /// The text at `range` of `buf` (a range [`TextBatch::push`] returned for it). Panics if
    /// `range` is out of bounds or not on character boundaries.
    pub fn new(buf: &Arc<String>, range: Range<usize>) -> Self {
        assert!(
            buf.get(range.clone()).is_some(),
            "{range:?} is not a text range of a buffer of {} bytes",
            buf.len()
        );
        Text {
            buf: buf.clone(),
            start: range.start,
            end: range.end,
        }
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        // In bounds and on character boundaries: checked when made.
        &self.buf[self.start..self.end]
    }
}

impl Default for Text {
    fn default() -> Self {
        Text::from(String::new())
    }
}

impl From<String> for Text {
    /// A text with a buffer of its own (no copy).
    fn from(s: String) -> Self {
        let end = s.len();
        Text {
            buf: Arc::new(s),
            start: 0,
            end,
        }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text::from(s.to_owned())
    }
}

impl From<Text> for String {
    fn from(t: Text) -> Self {
        if t.start == 0 && t.end == t.buf.len() {
            Arc::try_unwrap(t.buf).unwrap_or_else(|b| (*b).clone())
        } else {
            t.as_str().to_owned()
        }
    }
}

impl Deref for Text {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Text) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Text) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Text {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

/// The buffer a batch's lines are copied into before they are [shared](Self::share).
#[derive(Debug, Default)]
pub struct TextBatch {
    buf: String,
}

impl TextBatch {
    /// Appends `s`; returns its range, for [`Text::new`] once the batch is shared.
    #[inline]
    pub fn push(&mut self, s: &str) -> Range<usize> {
        let start = self.buf.len();
        self.buf.push_str(s);
        start..self.buf.len()
    }

    /// Bytes pushed since the last [`share`](Self::share).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was pushed since the last [`share`](Self::share).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The buffer of the lines pushed so far, to share among their [`Text`]s; the next batch
    /// starts empty, with room for as many bytes as this one.
    pub fn share(&mut self) -> Arc<String> {
        let next = String::with_capacity(self.buf.len());
        Arc::new(std::mem::replace(&mut self.buf, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_share_one_buffer_and_act_as_str() {
        let mut batch = TextBatch::default();
        let r = ["ab", "", "é!"].map(|s| batch.push(s));
        let buf = batch.share();
        assert!(batch.is_empty());
        let t: Vec<Text> = r.iter().map(|r| Text::new(&buf, r.clone())).collect();
        assert_eq!(Arc::strong_count(&buf), 4);
        assert_eq!(t[2], "é!");
        assert_eq!(t[1].len(), 0);
        assert_eq!(String::from(t[0].clone()), "ab");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"["ab","","é!"]"#);
        let back: Vec<Text> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        let mut set = std::collections::HashSet::new();
        set.insert(t[0].clone());
        assert!(set.contains("ab"));
    }

    #[test]
    #[should_panic(expected = "not a text range")]
    fn a_range_inside_a_character_is_refused() {
        let mut batch = TextBatch::default();
        batch.push("é");
        Text::new(&batch.share(), 0..1);
    }
}
