// A record has one key field at most: the error points at the second `key`.
use serde::{Deserialize, Serialize};
use weir::Record;

#[derive(Clone, Serialize, Deserialize, Record)]
struct Click {
    #[weir(key)]
    user: String,
    #[weir(key)]
    page: String,
    #[weir(event_time)]
    at_ms: u64,
}

fn main() {}
