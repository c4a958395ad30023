//! `cargo run -p resilience-figures [-- DIR]`: draws every CSV of
//! `deploy/figures/` (or of `DIR`) as an SVG beside it, and says which.

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(resilience_figures::figures_dir, Into::into);
    let files = match resilience_figures::csv_files(&dir) {
        Ok(files) => files,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for csv in files {
        let svg = csv.with_extension("svg");
        match resilience_figures::render_file(&csv)
            .and_then(|text| std::fs::write(&svg, text).map_err(|err| err.to_string()))
        {
            Ok(()) => println!("{}", svg.display()),
            Err(err) => {
                eprintln!("{err}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
