//! Every figure under `deploy/figures/` has its chart, and each chart is
//! what its CSV draws now: a CSV changed (a new measurement) without its
//! SVG redrawn fails here, with the command that redraws it.

use std::path::Path;

const REDRAW: &str = "cargo run -p resilience-figures";

#[test]
fn every_csv_has_its_svg_drawn_from_it() {
    let dir = resilience_figures::figures_dir();
    let files = resilience_figures::csv_files(&dir).unwrap();
    assert!(!files.is_empty(), "no CSV under {}", dir.display());
    let mut stale = Vec::new();
    for csv in &files {
        let drawn = resilience_figures::render_file(csv).unwrap_or_else(|err| panic!("{err}"));
        let svg = csv.with_extension("svg");
        match std::fs::read_to_string(&svg) {
            Ok(kept) if kept == drawn => {}
            Ok(_) => stale.push(format!("{} is not what its CSV draws now", name(&svg))),
            Err(_) => stale.push(format!(
                "{} has no chart ({} is missing)",
                name(csv),
                name(&svg)
            )),
        }
    }
    assert!(
        stale.is_empty(),
        "{}; redraw with `{REDRAW}`",
        stale.join("; ")
    );
}

#[test]
fn every_svg_is_drawn_from_a_csv() {
    let dir = resilience_figures::figures_dir();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "svg") {
            assert!(
                path.with_extension("csv").exists(),
                "{} has no CSV beside it: a chart is drawn from its data (`{REDRAW}`), never kept alone",
                name(&path)
            );
        }
    }
}

fn name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
