use resilience::Classify;

#[derive(Classify)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {}
