use resilience::retry;

#[retry(jitter = 0.05)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
