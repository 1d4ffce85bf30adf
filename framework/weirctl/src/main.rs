//! `weirctl`: watch and steer running jobs over their REST API. Everything is in
//! `weirctl::cli`; this only runs it and sets the exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut out = std::io::stdout().lock();
    match weirctl::cli::run(std::env::args_os(), &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_help() => {
            print!("{e}");
            ExitCode::SUCCESS
        }
        Err(weirctl::cli::CliError::Usage(m)) => {
            eprint!("{m}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("weirctl: error: {e}");
            ExitCode::FAILURE
        }
    }
}
