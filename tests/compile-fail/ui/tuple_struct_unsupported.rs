// An operator is a struct with named fields: the error points at the tuple's fields.
use weir::Operator;

#[derive(Operator)]
struct Counter(#[weir(state)] u64);

fn main() {}
