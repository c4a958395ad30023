use resilience::retry;

#[retry(jitter = "ful")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
