// Unknown keys are reported at the key, all of them at once.
use weir::Operator;

#[derive(Operator)]
#[weir(name = "counter", verison = 2)]
struct Counter {
    #[weir(stat)]
    seen: u64,
    #[weir(config, config)]
    limit: u64,
}

fn main() {}
