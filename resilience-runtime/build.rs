//! Sets `resilience_linked` on the targets whose linker gathers linkme's
//! sections: the one list of them the registry's site list depends on.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(resilience_linked)");
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let linked = [
        "linux", "android", "macos", "ios", "windows", "freebsd", "openbsd", "illumos",
    ];
    if linked.contains(&os.as_str()) {
        println!("cargo::rustc-cfg=resilience_linked");
    }
}
