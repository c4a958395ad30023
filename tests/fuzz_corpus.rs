//! The fuzz targets' checks (`fuzz/checks/`), run in the default
//! `cargo test` over the checked-in corpus (`fuzz/corpus/<target>/`: the
//! findings and the inputs the fuzzer kept) and over mutations of it, so
//! that a regression of any finding fails here without `cargo fuzz`.
//!
//! `FUZZ_REPLAY_CASES=100000 cargo test --test fuzz_corpus` tries more
//! mutations per target (2,000 by default); coverage-guided runs are
//! `cargo fuzz run <target>` in `fuzz/` (see RELIABILITY.md).

#[path = "../fuzz/checks/mod.rs"]
mod checks;

use std::path::Path;

/// xorshift64*: a fixed sequence, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes the parsers care about: digits, units, separators, edges.
const TOKENS: &[&[u8]] = &[
    b"0",
    b"9",
    b"1",
    b".",
    b"s",
    b"ms",
    b"us",
    b"\xc2\xb5s",
    b"ns",
    b"m",
    b"h",
    b"min",
    b" ",
    b"-",
    b"999999999999999999999",
    b"GMT",
    b", ",
    b":",
    b"\"",
    b"\n",
    b"=",
    b"[",
    b"]",
    b"\xff",
    b"\x00",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(4) {
            0 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                out.splice(at..at, token.iter().copied());
            }
            1 if at < out.len() => {
                out.remove(at);
            }
            2 if at < out.len() => out[at] = rng.next() as u8,
            _ => out.truncate(at),
        }
    }
    out
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    inputs
}

#[test]
fn every_target_holds_on_its_corpus_and_on_mutations_of_it() {
    let cases: usize = std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .map(|n| n.parse().expect("FUZZ_REPLAY_CASES is a number"))
        .unwrap_or(2_000);
    for &(target, check) in checks::TARGETS {
        let inputs = corpus(target);
        for input in &inputs {
            check(input);
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
        for _ in 0..cases {
            let seed = &inputs[rng.below(inputs.len())];
            let input = mutate(&mut rng, seed);
            let run = std::panic::catch_unwind(|| check(&input));
            assert!(
                run.is_ok(),
                "target `{target}` failed on {:?} (bytes {input:?})",
                String::from_utf8_lossy(&input)
            );
        }
    }
}

#[test]
fn the_findings_are_in_the_corpus() {
    // The inputs that broke main before they were fixed stay replayed.
    let durations = corpus("duration");
    for finding in [
        &b"340282366920938463463374607431.999999999s"[..],
        b"94522879700260684295381835.999999999999h",
    ] {
        assert!(durations.iter().any(|input| input == finding));
    }
    assert!(
        corpus("config")
            .iter()
            .any(|c| c.ends_with(b"half_open = 70000\n"))
    );
    assert!(corpus("idempotency_key").iter().any(|k| k.len() == 10_240));
}
