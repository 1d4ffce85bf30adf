//! How the Nexmark events are generated: the settings of the Flink suite, turned into the
//! `nexmark` crate's configuration.

use super::error::NexmarkError;
use super::source::NexmarkSource;
use super::Event;
use weir::error::SourceError;
use weir::source::SourceContext;

/// The time of the first event, in ms since the epoch: 2015-07-15 00:00:00 UTC, fixed so
/// that two runs generate the same events (the suite's generator takes the wall clock).
pub const DEFAULT_BASE_TIME: u64 = 1_436_918_400_000;

/// Events per second of event time: the rate of Flink's published runs (100M events span
/// 10 s of event time).
pub const DEFAULT_FIRST_EVENT_RATE: u64 = 10_000_000;

/// What the Nexmark source generates: how many events, how dense in event time, from when,
/// and in which proportions.
///
/// The events form one timeline: event `n` has the timestamp
/// `base_time + n * 1000 / first_event_rate` ms (rounded), whichever source subtask
/// generates it, so the parallel subtasks' events interleave in time.
///
/// ```
/// use weir_nexmark::{event_time, GeneratorConfig};
///
/// let config = GeneratorConfig::new(1_000)
///     .with_first_event_rate(1_000) // one event per ms of event time
///     .with_base_time(0);
/// let events: Vec<_> = config.events().collect();
/// assert_eq!(events.len(), 1_000);
/// assert_eq!(event_time(&events[999]), 999);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// Events generated in total, over all source subtasks.
    pub events: u64,
    /// Events per second of event time (the suite's `first-event.rate`, which equals its
    /// `next-event.rate` in every published run): the spacing of the events' timestamps.
    pub first_event_rate: u64,
    /// The first event's timestamp, in ms since the epoch.
    pub base_time: u64,
    /// Persons in every `person + auction + bid` events.
    pub person_proportion: usize,
    /// Auctions in every `person + auction + bid` events.
    pub auction_proportion: usize,
    /// Bids in every `person + auction + bid` events.
    pub bid_proportion: usize,
    /// The id of event 0 (the generator's `first_event_id`): each event's content (ids,
    /// names, prices) is drawn from a random generator seeded with its id, so another first
    /// id gives other events on the same timeline, a seed. 0 in the suite.
    pub first_event_id: u64,
}

impl GeneratorConfig {
    /// `events` events with the suite's settings: proportions 1:3:46,
    /// [`DEFAULT_FIRST_EVENT_RATE`], [`DEFAULT_BASE_TIME`].
    ///
    /// ```
    /// let config = weir_nexmark::GeneratorConfig::new(10);
    /// assert_eq!((config.person_proportion, config.auction_proportion, config.bid_proportion), (1, 3, 46));
    /// ```
    pub fn new(events: u64) -> Self {
        GeneratorConfig {
            events,
            first_event_rate: DEFAULT_FIRST_EVENT_RATE,
            base_time: DEFAULT_BASE_TIME,
            person_proportion: 1,
            auction_proportion: 3,
            bid_proportion: 46,
            first_event_id: 0,
        }
    }

    /// With `rate` events per second of event time.
    ///
    /// ```
    /// let config = weir_nexmark::GeneratorConfig::new(10).with_first_event_rate(1_000);
    /// assert_eq!(config.first_event_rate, 1_000);
    /// ```
    pub fn with_first_event_rate(mut self, rate: u64) -> Self {
        self.first_event_rate = rate;
        self
    }

    /// With the first event at `ms` since the epoch.
    ///
    /// ```
    /// let config = weir_nexmark::GeneratorConfig::new(10).with_base_time(0);
    /// assert_eq!(config.base_time, 0);
    /// ```
    pub fn with_base_time(mut self, ms: u64) -> Self {
        self.base_time = ms;
        self
    }

    /// With `person:auction:bid` proportions (each at least 1).
    ///
    /// ```
    /// let config = weir_nexmark::GeneratorConfig::new(10).with_proportions(1, 1, 8);
    /// assert!(config.validate().is_ok());
    /// assert!(config.with_proportions(0, 1, 1).validate().is_err());
    /// ```
    pub fn with_proportions(mut self, person: usize, auction: usize, bid: usize) -> Self {
        self.person_proportion = person;
        self.auction_proportion = auction;
        self.bid_proportion = bid;
        self
    }

    /// With the events' ids (and so their contents) starting at `id`: a seed. It must be a
    /// multiple of the three proportions' sum (50 in the suite's), or the generator repeats
    /// auction ids ([`validate`](Self::validate) refuses it).
    ///
    /// ```
    /// use weir_nexmark::GeneratorConfig;
    /// let a: Vec<_> = GeneratorConfig::new(50).events().collect();
    /// let b: Vec<_> = GeneratorConfig::new(50).with_first_event_id(7_000).events().collect();
    /// assert_ne!(a, b);
    /// // The same timeline: event n's time does not depend on the seed.
    /// assert_eq!(a[49].timestamp(), b[49].timestamp());
    /// assert!(GeneratorConfig::new(50).with_first_event_id(7).validate().is_err());
    /// ```
    pub fn with_first_event_id(mut self, id: u64) -> Self {
        self.first_event_id = id;
        self
    }

    /// Checks every setting: a rate of at least 1 event/s, and proportions of at least 1
    /// (the generator's id arithmetic needs one of each kind per cycle).
    ///
    /// ```
    /// use weir_nexmark::{GeneratorConfig, NexmarkError};
    /// let err = GeneratorConfig::new(10).with_first_event_rate(0).validate().unwrap_err();
    /// assert!(matches!(err, NexmarkError::BadSetting { setting: "first_event_rate", .. }));
    /// ```
    pub fn validate(&self) -> Result<(), NexmarkError> {
        let bad = |setting, value: &dyn std::fmt::Display, why| NexmarkError::BadSetting {
            setting,
            value: value.to_string(),
            why,
        };
        if self.first_event_rate == 0 {
            return Err(bad(
                "first_event_rate",
                &self.first_event_rate,
                "at least 1 event per second",
            ));
        }
        if usize::try_from(self.first_event_rate).is_err() {
            return Err(bad(
                "first_event_rate",
                &self.first_event_rate,
                "at most usize::MAX",
            ));
        }
        for (setting, value) in [
            ("person_proportion", self.person_proportion),
            ("auction_proportion", self.auction_proportion),
            ("bid_proportion", self.bid_proportion),
        ] {
            if value == 0 {
                return Err(bad(setting, &value, "at least 1"));
            }
        }
        let cycle = self
            .person_proportion
            .checked_add(self.auction_proportion)
            .and_then(|s| s.checked_add(self.bid_proportion));
        if cycle.is_none() {
            return Err(bad(
                "bid_proportion",
                &self.bid_proportion,
                "the three proportions must add up to at most usize::MAX",
            ));
        }
        if usize::try_from(self.events).is_err() {
            return Err(bad("events", &self.events, "at most usize::MAX"));
        }
        let last_id = usize::try_from(self.first_event_id)
            .ok()
            .and_then(|first| first.checked_add(usize::try_from(self.events).ok()?));
        if last_id.is_none() {
            return Err(bad(
                "first_event_id",
                &self.first_event_id,
                "first_event_id + events must be at most usize::MAX",
            ));
        }
        // The generator takes an event's kind from its number and its id from
        // `first_event_id + number`: off the cycle, auctions get the ids of other auctions
        // (each id three times in the suite's proportions) and the joins see one auction as
        // several.
        if let Some(cycle) = cycle {
            if !self.first_event_id.is_multiple_of(cycle as u64) {
                return Err(bad(
                    "first_event_id",
                    &self.first_event_id,
                    "a multiple of person + auction + bid proportions (50 in the suite's), or \
                     auction and person ids repeat",
                ));
            }
        }
        Ok(())
    }

    /// The `nexmark` crate's configuration for these settings: one generator timeline, a
    /// constant rate, and the Flink suite's strings (capitalized states, cities and names, so
    /// q3's `state = 'OR'` matches as it does on Flink; the crate's own are lower case).
    ///
    /// ```
    /// let nc = weir_nexmark::GeneratorConfig::new(10).nexmark_config().unwrap();
    /// assert!(nc.us_states.contains(&"OR".to_string()));
    /// ```
    pub fn nexmark_config(&self) -> Result<nexmark::config::NexmarkConfig, NexmarkError> {
        self.validate()?;
        let rate =
            usize::try_from(self.first_event_rate).map_err(|_| NexmarkError::BadSetting {
                setting: "first_event_rate",
                value: self.first_event_rate.to_string(),
                why: "at most usize::MAX",
            })?;
        let split = |s: &str| s.split(',').map(str::to_owned).collect::<Vec<_>>();
        Ok(nexmark::config::NexmarkConfig {
            base_time: self.base_time,
            person_proportion: self.person_proportion,
            auction_proportion: self.auction_proportion,
            bid_proportion: self.bid_proportion,
            first_rate: rate,
            next_rate: rate,
            rate_shape: nexmark::config::RateShape::Square,
            num_event_generators: 1,
            first_event_id: usize::try_from(self.first_event_id).map_err(|_| {
                NexmarkError::BadSetting {
                    setting: "first_event_id",
                    value: self.first_event_id.to_string(),
                    why: "at most usize::MAX",
                }
            })?,
            us_states: split("AZ,CA,ID,OR,WA,WY"),
            us_cities: split(
                "Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne",
            ),
            first_names: split("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter"),
            last_names: split("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris"),
            ..nexmark::config::NexmarkConfig::default()
        })
    }

    /// The source of subtask `cx`: the events `cx.subtask, cx.subtask + p, ...` below
    /// [`events`](Self::events), `p` the source's parallelism.
    ///
    /// ```
    /// use weir_nexmark::GeneratorConfig;
    /// use weir::source::SourceContext;
    /// let source = GeneratorConfig::new(10)
    ///     .source(SourceContext { subtask: 1, parallelism: 4 })
    ///     .unwrap();
    /// assert_eq!(source.offset(), 1);
    /// assert_eq!(source.remaining(), 3); // events 1, 5, 9
    /// ```
    pub fn source(&self, cx: SourceContext) -> Result<NexmarkSource, NexmarkError> {
        NexmarkSource::new(self.nexmark_config()?, cx, self.events)
    }

    /// A source factory for [`Env::add_source`](weir::Env::add_source): each subtask gets
    /// [`source`](Self::source) of its context. A bad setting fails the job when it starts,
    /// without a restart ([`SourceError::Setup`]).
    ///
    /// ```
    /// let env = weir::Env::new();
    /// let all = env
    ///     .add_source("nexmark", weir_nexmark::GeneratorConfig::new(1_000).factory())
    ///     .set_parallelism(2)
    ///     .collect();
    /// env.execute("nexmark-factory-doc").unwrap();
    /// assert_eq!(all.take().len(), 1_000);
    /// ```
    pub fn factory(
        &self,
    ) -> impl Fn(SourceContext) -> Result<NexmarkSource, SourceError> + Clone + Send + Sync + 'static
    {
        let config = self.clone();
        move |cx| {
            config.source(cx).map_err(|e| SourceError::Setup {
                source: Box::new(e),
            })
        }
    }

    /// Every event in the order of the global timeline (event 0, 1, 2, ...), as one source
    /// subtask of parallelism 1 emits them: the input of the references. Empty if a setting
    /// is invalid ([`validate`](Self::validate) says which).
    ///
    /// ```
    /// let config = weir_nexmark::GeneratorConfig::new(50);
    /// let kinds: Vec<_> = config.events().map(|e| e.event_type()).collect();
    /// assert_eq!(kinds.iter().filter(|k| **k == weir_nexmark::EventType::Bid).count(), 46);
    /// ```
    pub fn events(&self) -> impl Iterator<Item = Event> {
        let events = usize::try_from(self.events).unwrap_or(0);
        self.nexmark_config()
            .ok()
            .map(|c| nexmark::EventGenerator::new(c).take(events))
            .into_iter()
            .flatten()
    }
}
