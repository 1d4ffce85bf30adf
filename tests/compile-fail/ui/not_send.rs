// An operator runs on an actor thread: a field that is not `Send` is the compiler's error.
use std::rc::Rc;
use weir::Operator;

#[derive(Operator)]
struct Shared {
    #[weir(state)]
    count: u64,
    cache: Rc<Vec<u64>>,
}

fn main() {}
