use resilience::retry;

#[retry(jitter = "full 0.3")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
