//! The documented shape of a figure's CSV (`deploy/figures/README.md`):
//! what is drawn from it, and the errors that name what is wrong.

use resilience_figures::{Figure, render};

/// A fleet's per-second quota, as another measurement writes it: no
/// units, no series; one panel, one line per column, drawn.
#[test]
fn a_fleet_quota_per_second_is_one_panel_of_its_columns() {
    let csv = "second,admitted,quota,burst\n1,998,1000,1100\n2,1003,1000,1100\n3,,1000,1100\n";
    let figure = Figure::parse("fleet-quota", csv).unwrap();
    assert_eq!(figure.panels().len(), 1);
    let svg = render(&figure).unwrap();
    for name in ["admitted", "quota", "burst", "second", "fleet-quota"] {
        assert!(svg.contains(name), "{name} not drawn");
    }
    // The same data, the same bytes.
    assert_eq!(
        svg,
        render(&Figure::parse("fleet-quota", csv).unwrap()).unwrap()
    );
}

#[test]
fn columns_of_one_unit_share_a_panel_and_series_split_the_rows() {
    let csv = "# title: Goodput\nload [× sustained],series,goodput [%],p99 [ms],p50 [ms]\n1,a,99,30,12\n2,a,98,31,13\n1,b,100,25,11\n";
    let figure = Figure::parse("x", csv).unwrap();
    assert_eq!(figure.panels().len(), 2);
    let svg = render(&figure).unwrap();
    assert!(svg.contains("Goodput"));
    assert!(svg.contains("a: p99") && svg.contains("b: p50"), "{svg}");
}

#[test]
fn a_category_axis_keeps_the_order_of_the_rows() {
    let csv = "path,time [ns]\nRateLimit::try_acquire,39\ngovernor check,12\n";
    let svg = render(&Figure::parse("x", csv).unwrap()).unwrap();
    let first = svg.find("RateLimit::try_acquire").unwrap();
    let second = svg.find("governor check").unwrap();
    assert!(first < second);
}

#[test]
fn a_malformed_csv_is_refused_naming_the_line_and_the_value() {
    let err = Figure::parse("x", "load,series,goodput\n1,no budget, no limit,3\n").unwrap_err();
    assert!(
        err.contains("x.csv line 2: 4 fields where the header has 3"),
        "{err}"
    );
    let err = Figure::parse("x", "load,goodput\n1,fast\n").unwrap_err();
    assert!(
        err.contains("line 2: `fast` in column `goodput` is not a number"),
        "{err}"
    );
    let err = Figure::parse("x", "load\n1\n").unwrap_err();
    assert!(
        err.contains("needs an x column and at least one value column"),
        "{err}"
    );
    let err = Figure::parse("x", "load,goodput\n").unwrap_err();
    assert!(err.contains("no row"), "{err}");
}
