// `ttl` is for keyed state fields; a keyed field is a keyed state type.
use weir::Operator;

#[derive(Operator)]
struct Detector {
    #[weir(state, ttl = std::time::Duration::from_secs(60))]
    last_seen: u64,
    #[weir(ttl = std::time::Duration::from_secs(60))]
    flag: weir::ValueState<bool>,
}

fn main() {}
