//! The job's own operators: [`Attach`] (`connect`), [`ParseAndLevel`] (`flat_map`) and
//! [`DropUnwanted`] (`filter`).
//!
//! Owns their state, config and `process` functions. It does not wire them into a graph, set
//! their uids or parallelism (`graph`), nor hold the per-record logic they call (`clean`).

use weir::{BroadcastProcessFunction, Collector, Data, Operator, ProcessFunction};

use super::clean::clean_located;
use super::records::{BadRecord, Cleaned, ContentFlag, LevelThreshold, Tagged, Thresholds};

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
/// let tagged: Vec<Tagged<String>> = out.take();
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

// ANCHOR: operators
/// The `flat_map` operator: parses each line and assigns its level, one `Ok(Cleaned)` or
/// `Err(BadRecord)` (with the line's file, line number and byte offset) per line. Its counters are operator state: they are snapshotted and
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
        let r = clean_located(t.line, &t.levels);
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
