//! The per-record logic of the job, as plain functions: a line to a [`Cleaned`] or a
//! [`BadRecord`] ([`clean_line`], [`clean`]), the [`ContentFlag`] of a content
//! ([`content_flag`]), and a [`Cleaned`] to its output line ([`format_cleaned`]).
//!
//! Owns the borrowing parse of a line (`AnswerRef`) and the level assignment. It does not
//! define the records (`records`) nor wrap these functions in operators (`operators`).

use std::fmt::Write as _;

use serde::Deserialize;
use weir::Line;

use super::records::{Answer, BadRecord, Cleaned, ContentFlag, Thresholds};

/// The same fields as [`Answer`], borrowing the strings from the line when they have no
/// escapes: what the job parses (the same validation as [`Answer`], no allocation).
#[derive(Deserialize)]
struct AnswerRef<'a> {
    id: u64,
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

/// Formats the output line of `c` (what the `map` operator emits).
#[inline]
pub fn format_cleaned(c: &Cleaned) -> String {
    let mut s = String::with_capacity(48);
    let _ = write!(s, "{c}");
    s
}

/// Assigns the level of an answer with `likes` and `content`: `Err` if no threshold applies.
#[inline]
fn cleaned(
    id: u64,
    user_id: u64,
    likes: u64,
    ts_ms: u64,
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
        ts_ms,
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
        answer.ts_ms,
        &answer.content,
        levels,
    )
}

/// Parses `line` and assigns its level: [`clean_located`] for a line without coordinates
/// (its [`BadRecord`] has none). A line that is not an [`Answer`], or whose likes are below
/// every threshold, becomes a [`BadRecord`].
///
/// ```
/// use weir_examples::answers::{clean_line, default_levels, Thresholds};
/// let levels = Thresholds::from_vec(default_levels());
/// let line = r#"{"id":42,"ts_ms":7,"user":{"id":36972,"name":"u","followers":1},
///   "question_id":1,"likes":390,"favorites":0,"comments":0,"content":"checkpoint"}"#;
/// let c = clean_line(line.to_string(), &levels).unwrap();
/// assert_eq!((c.to_string().as_str(), c.ts_ms), ("42,36972,390,L2", 7));
/// let bad = clean_line("{not json".to_string(), &levels).unwrap_err();
/// assert_eq!(bad.line, "{not json");
/// ```
#[inline]
pub fn clean_line(line: String, levels: &Thresholds) -> Result<Cleaned, BadRecord> {
    parse_and_level(&line, levels).map_err(|error| BadRecord::new(line, error))
}

/// [`clean_line`] of a borrowed line: allocates only for a [`BadRecord`].
///
/// ```
/// use weir_examples::answers::{clean_str, default_levels, Thresholds};
/// let levels = Thresholds::from_vec(default_levels());
/// let line = r#"{"id":42,"ts_ms":7,"user":{"id":36972,"name":"u","followers":1},
///   "question_id":1,"likes":390,"favorites":0,"comments":0,"content":"checkpoint"}"#;
/// assert_eq!(clean_str(line, &levels).unwrap().to_string(), "42,36972,390,L2");
/// assert_eq!(clean_str("{not json", &levels).unwrap_err().line, "{not json");
/// ```
#[inline]
pub fn clean_str(line: &str, levels: &Thresholds) -> Result<Cleaned, BadRecord> {
    parse_and_level(line, levels).map_err(|error| BadRecord::new(line.to_owned(), error))
}

/// The `flat_map` step: parses `line` and assigns its level. A line that is not an
/// [`Answer`], or whose likes are below every threshold, becomes a [`BadRecord`] with the
/// line's file, line number and byte offset.
///
/// ```
/// use std::sync::Arc;
/// use weir_examples::answers::{clean_located, default_levels, Thresholds};
/// let levels = Thresholds::from_vec(default_levels());
/// let line = weir::Line { path: Arc::from("in.jsonl"), line: 3, byte_offset: 80, text: "{not json".into() };
/// let bad = clean_located(line, &levels).unwrap_err();
/// assert_eq!((bad.path.as_deref(), bad.line_number, bad.byte_offset), (Some("in.jsonl"), Some(3), Some(80)));
/// ```
#[inline]
pub fn clean_located(mut line: Line, levels: &Thresholds) -> Result<Cleaned, BadRecord> {
    parse_and_level(&line.text, levels).map_err(|error| {
        let text = String::from(std::mem::take(&mut line.text));
        BadRecord::at(&line, text, error)
    })
}

#[inline]
fn parse_and_level(line: &str, levels: &Thresholds) -> Result<Cleaned, String> {
    match serde_json::from_str::<AnswerRef<'_>>(line) {
        Ok(a) => cleaned(a.id, a.user.id, a.likes, a.ts_ms, &a.content, levels),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::LevelThreshold;

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
}
