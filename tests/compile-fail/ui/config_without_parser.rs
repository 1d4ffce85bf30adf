// A `#[weir(config)]` field must parse from text (`FromStr`): the error points at its type.
use weir::Operator;

enum Mode {
    Fast,
    Careful,
}

#[derive(Operator)]
struct Switch {
    #[weir(config)]
    mode: Mode,
    #[weir(config)]
    limit: u64,
}

fn main() {
    let _ = (Mode::Fast, Mode::Careful);
}
