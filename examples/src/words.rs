//! Word count: lines → words → `key_by(word)` → a count per word, emitted once at the end of
//! the input (a keyed process function's `end_of_input`).

use std::path::PathBuf;

use std::collections::HashMap;

use weir::{CollectSink, Collector, DataStream, Env, Operator, ProcessFunction};

use crate::rng::SplitMix64;

const VOCABULARY: &[&str] = &[
    "the", "of", "and", "a", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on",
    "are", "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had",
    "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said",
    "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up",
    "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil",
    "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part",
    "stream",
];

/// Generated line `index` of stream `seed`: 4 to 15 words, skewed towards the start of the
/// vocabulary (so a few words are much more frequent than the rest).
///
/// ```
/// let l = weir_examples::words::text_line(1, 2);
/// assert!(l.split(' ').count() >= 4);
/// assert_eq!(l, weir_examples::words::text_line(1, 2));
/// ```
pub fn text_line(seed: u64, index: u64) -> String {
    let mut r = SplitMix64::for_item(seed, index);
    let n = r.range(4, 16);
    let mut s = String::with_capacity(80);
    for k in 0..n {
        if k > 0 {
            s.push(' ');
        }
        let u = r.unit();
        s.push_str(VOCABULARY[(u * u * VOCABULARY.len() as f64) as usize]);
    }
    s
}

/// The words of a line: split on anything not alphanumeric (or `'`), lowercased.
///
/// ```
/// assert_eq!(weir_examples::words::words_of("It's a Test, a test."), ["it's", "a", "test", "a", "test"]);
/// ```
pub fn words_of(line: &str) -> Vec<String> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

// ANCHOR: counter
/// Counts words; emits `(word, count)` once per word at the end of the input. Fed by a
/// stream keyed by word, so each subtask counts its own words. The counts are one map per
/// subtask, emitted whole at the end of the input, so they are marked as per-subtask
/// (`operator_state`) state; `min_len` can be changed on a running job.
#[derive(Debug, Clone, Operator)]
#[weir(name = "word-counter", version = 1)]
pub struct WordCounter {
    /// Words shorter than this (in characters) are not counted (default 1).
    #[weir(config)]
    pub min_len: usize,
    /// Count per word.
    #[weir(operator_state)]
    pub counts: HashMap<String, u64>,
}

impl Default for WordCounter {
    fn default() -> Self {
        WordCounter {
            min_len: 1,
            counts: HashMap::new(),
        }
    }
}

impl ProcessFunction<String, (String, u64)> for WordCounter {
    #[inline]
    fn process(&mut self, word: String, _out: &mut Collector<(String, u64)>) {
        if word.chars().count() >= self.min_len {
            *self.counts.entry(word).or_insert(0) += 1;
        }
    }

    fn end_of_input(&mut self, out: &mut Collector<(String, u64)>) {
        out.extend(self.counts.drain());
    }
}
// ANCHOR_END: counter

/// Where the lines come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    /// `lines` generated lines ([`text_line`]) of stream `seed`.
    Generated {
        /// How many.
        lines: u64,
        /// Which stream.
        seed: u64,
    },
    /// The lines of a file, or of a directory's files.
    Lines(PathBuf),
}

/// Adds the word count job to `env`; the returned handle holds `(word, count)` per word after
/// the job.
///
/// ```
/// use weir::Env;
/// use weir_examples::words::{build_wordcount, Text};
/// let env = Env::new();
/// let counts = build_wordcount(&env, &Text::Generated { lines: 1_000, seed: 3 }, 2);
/// env.execute("wordcount-doc").unwrap();
/// let counts = counts.take();
/// let total: u64 = counts.iter().map(|(_, n)| n).sum();
/// let expected: usize = (0..1_000).map(|i| weir_examples::words::text_line(3, i).split(' ').count()).sum();
/// assert_eq!(total, expected as u64);
/// ```
pub fn build_wordcount(env: &Env, text: &Text, parallelism: usize) -> CollectSink<(String, u64)> {
    // ANCHOR: wordcount
    let lines: DataStream<String> = match text {
        Text::Generated { lines, seed } => {
            let seed = *seed;
            env.generate(*lines, move |i| text_line(seed, i))
        }
        Text::Lines(path) => env.read_lines(path),
    };
    lines
        .uid("source")
        .set_parallelism(parallelism)
        .flat_map(|line: String| words_of(&line))
        .uid("words")
        .set_parallelism(parallelism)
        .key_by(|w: &String| w.clone())
        .apply(WordCounter::default())
        .uid("count")
        .set_parallelism(parallelism)
        .collect()
    // ANCHOR_END: wordcount
}

/// The `n` most frequent words, most frequent first (ties by word).
pub fn top(mut counts: Vec<(String, u64)>, n: usize) -> Vec<(String, u64)> {
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts.truncate(n);
    counts
}
