//! Word count: lines (generated, or `--input`) → words → `key_by(word)` → one final count per
//! word (emitted by the keyed function's `end_of_input`) → the top 10, printed.
//!
//! ```text
//! cargo run --release --example wordcount -- --lines 1000000 --parallelism 2
//! cargo run --release --example wordcount -- --input README.md
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use weir::Env;
use weir_examples::words::{build_wordcount, top, Text};

/// Counts words and prints the most frequent.
#[derive(Parser, Debug)]
#[command(name = "wordcount")]
struct Args {
    /// A text file or directory; without it, lines are generated.
    #[arg(long, value_name = "FILE_OR_DIR")]
    input: Option<PathBuf>,
    /// Number of lines to generate (without --input).
    #[arg(long, default_value_t = 100_000)]
    lines: u64,
    /// Seed of the generated lines.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Parallelism of every operator.
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// How many words to print.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

fn run(args: Args) -> Result<(), String> {
    if args.parallelism == 0 {
        return Err("--parallelism must be at least 1".into());
    }
    let text = match &args.input {
        Some(path) => {
            std::fs::metadata(path)
                .map_err(|e| format!("cannot read input {}: {e}", path.display()))?;
            Text::Lines(path.clone())
        }
        None => Text::Generated {
            lines: args.lines,
            seed: args.seed,
        },
    };
    let env = Env::new();
    let counts = build_wordcount(&env, &text, args.parallelism);
    let result = env.execute("wordcount").map_err(|e| e.to_string())?;
    let counts = counts.take();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    println!(
        "{total} words, {} distinct, in {:.3} s",
        counts.len(),
        result.duration.as_secs_f64()
    );
    for (i, (word, n)) in top(counts, args.top).into_iter().enumerate() {
        println!("{:>3}. {word:<20} {n:>12}", i + 1);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wordcount: error: {e}");
            ExitCode::FAILURE
        }
    }
}
