// A `#[weir(state)]` field must be serializable: the error points at the field's type.
use weir::Operator;

struct Opaque;

#[derive(Operator)]
struct Holder {
    #[weir(state)]
    inner: Opaque,
    #[weir(state)]
    count: u64,
}

fn main() {}
