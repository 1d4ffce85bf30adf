// An operator is a struct with named fields.
use weir::Operator;

#[derive(Operator)]
enum Stage {
    Warmup,
    Running { seen: u64 },
}

fn main() {}
