use resilience::{circuit_breaker, retry};

#[circuit_breaker(name = "users")]
#[retry]
fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
