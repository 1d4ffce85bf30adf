// A `#[weir(config)]` field's parse error must be `Display` (it goes into the error message).
use std::str::FromStr;
use weir::Operator;

#[derive(Debug)]
struct NoMessage;

struct Level(u8);

impl FromStr for Level {
    type Err = NoMessage;
    fn from_str(s: &str) -> Result<Self, NoMessage> {
        s.parse().map(Level).map_err(|_| NoMessage)
    }
}

#[derive(Operator)]
struct Leveled {
    #[weir(config)]
    level: Level,
}

fn main() {}
