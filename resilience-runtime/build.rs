//! Sets `resilience_linked` when the `site-list` feature is on and the
//! target's linker gathers linkme's sections: the one list of them the
//! registry's site list depends on.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(resilience_linked)");
    println!("cargo::rerun-if-changed=build.rs");
    // Cargo sets it for the features of this build; the build script is
    // run again whenever they change.
    if std::env::var_os("CARGO_FEATURE_SITE_LIST").is_none() {
        return;
    }
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let linked = [
        "linux", "android", "macos", "ios", "windows", "freebsd", "openbsd", "illumos",
    ];
    if linked.contains(&os.as_str()) {
        println!("cargo::rustc-cfg=resilience_linked");
    }
}
