//! The driver versions README.md promises are the ones the integrations
//! are built with.
//!
//! A user who adds `sqlx` 0.9 to a crate using resilience's `sqlx-postgres`
//! (built on 0.8) gets two versions of the driver and errors that do not
//! name the cause; the README's table tells them which version to take.
//! This test reads that table and the workspace's `Cargo.lock`, so the
//! table moves with every upgrade of a driver.
#![deny(warnings)]

const README: &str = include_str!("../README.md");
const LOCK: &str = include_str!("../Cargo.lock");

/// The rows of the README's "Driver versions" table: (drivers, version).
fn promised() -> Vec<(Vec<String>, String)> {
    let section = README
        .split("## Driver versions")
        .nth(1)
        .expect("README.md has a \"## Driver versions\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let drivers = cells[2]
                .split(',')
                .map(|driver| driver.trim().trim_matches('`').to_owned())
                .collect();
            let version = cells[3].split(' ').next().unwrap_or_default().to_owned();
            (drivers, version)
        })
        .collect()
}

/// Every version of `name` in the lock file.
fn locked(name: &str) -> Vec<String> {
    LOCK.split("[[package]]")
        .filter(|package| package.contains(&format!("\nname = \"{name}\"\n")))
        .filter_map(|package| {
            package
                .lines()
                .find_map(|line| line.strip_prefix("version = \""))
                .map(|version| version.trim_end_matches('"').to_owned())
        })
        .collect()
}

/// Whether `version` is semver-compatible with the promise `major`
/// (`0.13` for 0.x crates, `1` from 1.0 on).
fn compatible(version: &str, promise: &str) -> bool {
    let parts: Vec<&str> = version.split('.').collect();
    let series = if parts[0] == "0" {
        format!("0.{}", parts[1])
    } else {
        parts[0].to_owned()
    };
    series == promise
}

#[test]
fn the_readme_names_the_driver_versions_the_lock_file_holds() {
    let rows = promised();
    assert!(rows.len() >= 8, "the table lost rows: {rows:?}");
    for (drivers, promise) in rows {
        for driver in drivers {
            let versions = locked(&driver);
            assert!(
                !versions.is_empty(),
                "README.md names `{driver}`, which Cargo.lock does not hold"
            );
            assert!(
                versions.iter().any(|version| compatible(version, &promise)),
                "README.md promises `{driver}` {promise}, Cargo.lock holds {versions:?}: \
                 update the \"Driver versions\" table"
            );
        }
    }
}

#[test]
fn every_driver_an_integration_depends_on_is_in_the_table() {
    let named: Vec<String> = promised().into_iter().flat_map(|(d, _)| d).collect();
    for driver in [
        "reqwest",
        "reqwest-middleware",
        "sqlx",
        "lapin",
        "async-nats",
        "redis",
        "axum-core",
        "tower-layer",
        "tower-service",
        "tonic",
        "metrics",
    ] {
        assert!(
            named.iter().any(|n| n == driver),
            "`{driver}` missing from README.md's driver table"
        );
    }
}

#[test]
fn versions_are_compared_by_their_semver_series() {
    assert!(compatible("0.13.5", "0.13"));
    assert!(!compatible("0.12.9", "0.13"));
    assert!(compatible("1.2.2", "1"));
    assert!(!compatible("2.0.0", "1"));
}
