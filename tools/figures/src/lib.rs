//! The charts of the figures in `BENCHMARKS.md` and `RELIABILITY.md`: each
//! CSV file under `deploy/figures/` drawn as an SVG file beside it
//! (`cargo run -p resilience-figures`), so that a reader sees the shape of
//! a table at a glance. `tests/up_to_date.rs` fails when an SVG is not
//! what its CSV draws now, or a CSV has no SVG.
//!
//! # The shape of a figure's CSV
//!
//! Any CSV of this shape gets its chart, with no change to the tool:
//!
//! - lines starting with `#` are comments; `# title: …` titles the chart
//!   (the file's name otherwise);
//! - the first line is the header, then one row per point, fields split on
//!   `,` (no quoting: no field holds a comma) and trimmed;
//! - the **first column is the x axis**, its header the axis' label: all
//!   numbers give a numeric axis (`second`, `load [× sustained]`), anything
//!   else categories in the order they first appear (`variant`);
//! - an optional column named **`series`** splits the rows into lines, one
//!   per value, in the order they first appear (`no limit`,
//!   `AdaptiveLimit`); without it, each value column is one line;
//! - **every other column is a value**, a number or empty (no point),
//!   its header `name` or `name [unit]`: the columns of one unit share a
//!   panel (`admitted [calls/s]` and `quota [calls/s]` are drawn on one
//!   axis), and panels are stacked in the order their units first appear.
//!   Columns without a unit share one panel.
//!
//! ```
//! let csv = "second,admitted [calls/s],quota [calls/s]\n1,990,1000\n2,1004,1000\n";
//! let figure = resilience_figures::Figure::parse("fleet-quota", csv)?;
//! assert_eq!(figure.panels().len(), 1);
//! let svg = resilience_figures::render(&figure)?;
//! assert!(svg.starts_with("<svg"));
//! # Ok::<(), String>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

use std::path::{Path, PathBuf};

use plotters::prelude::*;

/// One figure read from its CSV: an x axis and panels of lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    title: String,
    x_label: String,
    /// `Some(names)` for a categorical axis, whose points sit at 0, 1, …
    categories: Option<Vec<String>>,
    panels: Vec<Panel>,
}

/// The value columns of one unit, drawn on one y axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The y axis' label.
    label: String,
    lines: Vec<Line>,
}

/// One line of a panel.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    name: String,
    /// Its place in the palette: the same series keeps its colour in every
    /// panel.
    colour: usize,
    points: Vec<(f64, f64)>,
}

/// A value column's header, `name [unit]`.
struct Column {
    name: String,
    unit: String,
}

impl Column {
    fn parse(header: &str) -> Column {
        match header.strip_suffix(']').and_then(|h| h.rsplit_once('[')) {
            Some((name, unit)) => Column {
                name: name.trim().to_owned(),
                unit: unit.trim().to_owned(),
            },
            None => Column {
                name: header.to_owned(),
                unit: String::new(),
            },
        }
    }
}

impl Figure {
    /// Reads a figure from the text of its CSV, `name` being the file's
    /// name without `.csv` (the default title).
    ///
    /// # Errors
    ///
    /// A CSV not of the documented shape, naming the line and the value.
    pub fn parse(name: &str, text: &str) -> Result<Figure, String> {
        let mut title = name.to_owned();
        let mut rows: Vec<(usize, Vec<&str>)> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if let Some(comment) = line.strip_prefix('#') {
                if let Some(text) = comment.trim().strip_prefix("title:") {
                    title = text.trim().to_owned();
                }
                continue;
            }
            if !line.is_empty() {
                rows.push((number + 1, line.split(',').map(str::trim).collect()));
            }
        }
        let mut rows = rows.into_iter();
        let Some((_, header)) = rows.next() else {
            return Err(format!(
                "{name}.csv has no header: the first line names the x column, then the values"
            ));
        };
        if header.len() < 2 {
            return Err(format!(
                "{name}.csv has one column, `{}`: a figure needs an x column and at least one value column",
                header[0]
            ));
        }
        let series_at = header.iter().position(|h| *h == "series");
        if series_at == Some(0) {
            return Err(format!(
                "{name}.csv: the first column is the x axis, not `series`"
            ));
        }
        let values: Vec<(usize, Column)> = header
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(at, _)| Some(*at) != series_at)
            .map(|(at, h)| (at, Column::parse(h)))
            .collect();
        if values.is_empty() {
            return Err(format!("{name}.csv has no value column beside `series`"));
        }
        let rows: Vec<(usize, Vec<&str>)> = rows.collect();
        if rows.is_empty() {
            return Err(format!("{name}.csv has a header and no row"));
        }
        for (line, row) in &rows {
            if row.len() != header.len() {
                return Err(format!(
                    "{name}.csv line {line}: {} fields where the header has {}",
                    row.len(),
                    header.len()
                ));
            }
        }
        // The x axis: numbers, or else categories in order.
        let numeric = rows.iter().all(|(_, row)| number(row[0]).is_some());
        let mut categories: Vec<String> = Vec::new();
        if !numeric {
            for (_, row) in &rows {
                if !categories.iter().any(|c| c == row[0]) {
                    categories.push(row[0].to_owned());
                }
            }
        }
        let x_of = |x: &str| match number(x) {
            Some(x) if numeric => x,
            _ => categories.iter().position(|c| c == x).unwrap_or(0) as f64,
        };
        let mut series: Vec<&str> = Vec::new();
        if let Some(at) = series_at {
            for (_, row) in &rows {
                if !series.contains(&row[at]) {
                    series.push(row[at]);
                }
            }
        }
        // The panels, one per unit in order of first appearance.
        let mut units: Vec<&str> = Vec::new();
        for (_, column) in &values {
            if !units.contains(&column.unit.as_str()) {
                units.push(&column.unit);
            }
        }
        let mut panels = Vec::new();
        for unit in units {
            let columns: Vec<&(usize, Column)> =
                values.iter().filter(|(_, c)| c.unit == unit).collect();
            let label = match columns.as_slice() {
                [(_, only)] if unit.is_empty() => only.name.clone(),
                [(_, only)] => format!("{} [{unit}]", only.name),
                _ => unit.to_owned(),
            };
            let mut lines = Vec::new();
            for (at, column) in &columns {
                let column_index = values.iter().position(|(a, _)| a == at).unwrap_or(0);
                let groups: Vec<Option<&str>> = match series_at {
                    Some(_) => series.iter().map(|s| Some(*s)).collect(),
                    None => vec![None],
                };
                for (index, group) in groups.iter().enumerate() {
                    let mut points = Vec::new();
                    for (line, row) in &rows {
                        if let (Some(at), Some(group)) = (series_at, group)
                            && row[at] != *group
                        {
                            continue;
                        }
                        let cell = row[*at];
                        if cell.is_empty() {
                            continue;
                        }
                        let Some(y) = number(cell) else {
                            return Err(format!(
                                "{name}.csv line {line}: `{cell}` in column `{}` is not a number (a value is a number, or empty for no point)",
                                header[*at]
                            ));
                        };
                        points.push((x_of(row[0]), y));
                    }
                    let (name, colour) = match group {
                        Some(group) if columns.len() > 1 => (
                            format!("{group}: {}", column.name),
                            index * values.len() + column_index,
                        ),
                        Some(group) => ((*group).to_owned(), index),
                        None => (column.name.clone(), column_index),
                    };
                    if !points.is_empty() {
                        lines.push(Line {
                            name,
                            colour,
                            points,
                        });
                    }
                }
            }
            panels.push(Panel { label, lines });
        }
        Ok(Figure {
            title,
            x_label: header[0].to_owned(),
            categories: (!numeric).then_some(categories),
            panels,
        })
    }

    /// The panels, one per unit of the value columns.
    pub fn panels(&self) -> &[Panel] {
        &self.panels
    }
}

/// A finite number.
fn number(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Ten colours told apart by most readers (Tableau 10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const WIDTH: u32 = 1000;
const LEGEND: u32 = 300;
const TITLE: u32 = 40;
const PANEL: u32 = 300;

/// A number as an axis writes it: `0.5`, `2`, `1000`.
fn tick(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// Draws `figure` as an SVG document. The same figure always gives the
/// same text, byte for byte: no font is measured (plotters' estimate of a
/// text's size without a font), no clock or random number is read.
///
/// # Errors
///
/// A drawing error of plotters, as text.
pub fn render(figure: &Figure) -> Result<String, String> {
    let height = TITLE + PANEL * figure.panels.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let body = root
            .titled(&figure.title, ("sans-serif", 22))
            .map_err(|e| e.to_string())?;
        let areas = body.split_evenly((figure.panels.len(), 1));
        let (x_min, x_max) = match &figure.categories {
            Some(categories) => (-0.5, categories.len() as f64 - 0.5),
            None => {
                let xs = figure
                    .panels
                    .iter()
                    .flat_map(|p| &p.lines)
                    .flat_map(|l| &l.points)
                    .map(|p| p.0);
                let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                    (lo.min(x), hi.max(x))
                });
                let pad = if hi > lo { (hi - lo) * 0.03 } else { 1.0 };
                (lo - pad, hi + pad)
            }
        };
        // A numeric axis of a few points (loads of 0.5×, 1×, 2×, 4×; runs
        // 1, 2, 3) is labelled at its points only.
        let mut xs: Vec<f64> = figure
            .panels
            .iter()
            .flat_map(|p| &p.lines)
            .flat_map(|l| &l.points)
            .map(|p| p.0)
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let sparse = xs.len() <= 12;
        let category_label = |x: &f64| -> String {
            let Some(categories) = &figure.categories else {
                let near = xs.iter().any(|p| (p - x).abs() <= 1e-9 * p.abs().max(1.0));
                return if !sparse || near {
                    tick(*x)
                } else {
                    String::new()
                };
            };
            let index = x.round();
            if (x - index).abs() > 1e-6 || index < 0.0 {
                return String::new();
            }
            categories.get(index as usize).cloned().unwrap_or_default()
        };
        for (area, panel) in areas.iter().zip(&figure.panels) {
            let (plot, legend) = area.split_horizontally(WIDTH - LEGEND);
            let ys = panel.lines.iter().flat_map(|l| &l.points).map(|p| p.1);
            let (lo, hi) = ys.fold((0.0_f64, f64::NEG_INFINITY), |(lo, hi), y| {
                (lo.min(y), hi.max(y))
            });
            let hi = if hi > lo {
                hi + (hi - lo) * 0.08
            } else {
                lo + 1.0
            };
            let mut chart = ChartBuilder::on(&plot)
                .margin(12)
                .x_label_area_size(42)
                .y_label_area_size(70)
                .build_cartesian_2d(x_min..x_max, lo..hi)
                .map_err(|e| e.to_string())?;
            let x_labels = figure.categories.as_ref().map_or(10, Vec::len);
            chart
                .configure_mesh()
                .x_desc(figure.x_label.as_str())
                .y_desc(panel.label.as_str())
                .x_labels(x_labels)
                .x_label_formatter(&category_label)
                .y_label_formatter(&|y| tick(*y))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(|e| e.to_string())?;
            for (row, line) in panel.lines.iter().enumerate() {
                let colour = PALETTE[line.colour % PALETTE.len()];
                chart
                    .draw_series(LineSeries::new(
                        line.points.iter().copied(),
                        colour.stroke_width(2),
                    ))
                    .map_err(|e| e.to_string())?;
                chart
                    .draw_series(
                        line.points
                            .iter()
                            .map(|p| Circle::new(*p, 3, colour.filled())),
                    )
                    .map_err(|e| e.to_string())?;
                // The legend beside the plot, where it hides no point.
                let y = 24 + 20 * row as i32;
                legend
                    .draw(&PathElement::new(
                        vec![(8, y), (32, y)],
                        colour.stroke_width(3),
                    ))
                    .map_err(|e| e.to_string())?;
                legend
                    .draw(&Text::new(
                        line.name.as_str(),
                        (40, y - 7),
                        ("sans-serif", 14),
                    ))
                    .map_err(|e| e.to_string())?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Reads the CSV file at `path` and draws it.
///
/// # Errors
///
/// The file cannot be read, is not of the documented shape, or cannot be
/// drawn.
pub fn render_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("{}: cannot be read: {err}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("figure");
    render(&Figure::parse(name, &text)?)
}

/// The folder of the figures: `deploy/figures/` of this repository.
pub fn figures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/figures")
}

/// The CSV files of `dir`, sorted by name.
///
/// # Errors
///
/// The folder cannot be read.
pub fn csv_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|err| format!("{}: cannot be read: {err}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "csv"))
        .collect();
    files.sort();
    Ok(files)
}
