//! Side outputs: a keyed process function that passes sensor readings on and routes two kinds
//! of exception to streams of their own (`OutputTag`, `ctx.output`, `get_side_output`):
//! readings out of the sensor's range, as text, and jumps of more than 10 degrees since the
//! sensor's last reading, as alerts.

use weir::{
    CollectSink, Collector, DataStream, KeyedContext, KeyedProcessFunction, OutputTag, ValueState,
};

/// One reading of one sensor.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    /// The sensor.
    pub sensor: u32,
    /// What it read, in degrees Celsius.
    pub celsius: f64,
}

/// A jump of one sensor's readings: `(sensor, from, to)`.
pub type Jump = (u32, f64, f64);

// ANCHOR: checker
/// Passes valid readings on. A reading outside -50..=150 goes to `invalid` (as a line of
/// text) and is forgotten; a valid one more than 10 degrees from the sensor's last valid one
/// also goes to `jumps`, as `(sensor, from, to)`.
#[derive(Clone)]
pub struct Checker {
    /// Where readings out of range go.
    pub invalid: OutputTag<String>,
    /// Where jumps go.
    pub jumps: OutputTag<Jump>,
}

impl KeyedProcessFunction<u32, Reading, Reading> for Checker {
    /// The sensor's last valid reading.
    type State = ValueState<f64>;

    fn process_with_ctx(
        &mut self,
        sensor: &u32,
        last: &mut ValueState<f64>,
        r: Reading,
        ctx: &mut KeyedContext<'_, u32>,
        out: &mut Collector<Reading>,
    ) {
        if !(-50.0..=150.0).contains(&r.celsius) {
            ctx.output(&self.invalid, format!("sensor {sensor}: {} C", r.celsius));
            return;
        }
        if let Some(&before) = last.value() {
            if (r.celsius - before).abs() > 10.0 {
                ctx.output(&self.jumps, (*sensor, before, r.celsius));
            }
        }
        last.update(r.celsius);
        out.collect(r);
    }
}

/// The checker on `readings`, keyed by sensor: its valid readings, and its two side outputs.
pub fn checked(
    readings: DataStream<Reading>,
) -> (DataStream<Reading>, DataStream<String>, DataStream<Jump>) {
    let invalid = OutputTag::new("invalid");
    let jumps = OutputTag::new("jumps");
    let valid = readings
        .key_by(|r: &Reading| r.sensor)
        .process_with(Checker {
            invalid: invalid.clone(),
            jumps: jumps.clone(),
        })
        .uid("checker");
    let bad = valid.get_side_output(&invalid);
    let alerts = valid.get_side_output(&jumps);
    (valid, bad, alerts)
}
// ANCHOR_END: checker

/// Runs [`checked`] over `readings` and collects the three streams.
///
/// ```
/// use weir_examples::sensors::{run, Reading};
/// let r = |sensor, celsius| Reading { sensor, celsius };
/// let (valid, invalid, jumps) =
///     run(vec![r(1, 20.0), r(2, 5.0), r(1, 35.0), r(2, 900.0), r(2, 6.0)]).unwrap();
/// assert_eq!(valid.len(), 4);
/// assert_eq!(invalid, vec!["sensor 2: 900 C".to_owned()]);
/// assert_eq!(jumps, vec![(1, 20.0, 35.0)]);
/// ```
#[allow(clippy::type_complexity)]
pub fn run(
    readings: Vec<Reading>,
) -> Result<(Vec<Reading>, Vec<String>, Vec<Jump>), weir::JobError> {
    let env = weir::Env::new();
    let (valid, invalid, jumps) = checked(env.from_collection(readings));
    let (valid, invalid, jumps): (CollectSink<_>, CollectSink<_>, CollectSink<_>) =
        (valid.collect(), invalid.collect(), jumps.collect());
    env.execute("sensors")?;
    Ok((valid.take(), invalid.take(), jumps.take()))
}
