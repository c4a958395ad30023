use resilience::retry;

#[retry]
async fn user_profile(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
