// A struct passed to `KeyedStream::process` (which takes a closure) says where it goes.
use weir::{Collector, Env, KeyedProcessFunction, ValueState};

#[derive(Clone)]
struct Detector;

impl KeyedProcessFunction<u64, u64, u64> for Detector {
    type State = ValueState<u64>;
    fn process(&mut self, _k: &u64, _s: &mut ValueState<u64>, x: u64, out: &mut Collector<u64>) {
        out.collect(x);
    }
}

fn main() {
    let env = Env::new();
    let _ = env
        .from_collection(vec![1u64])
        .key_by(|x: &u64| *x)
        .process(Detector)
        .collect();
}
