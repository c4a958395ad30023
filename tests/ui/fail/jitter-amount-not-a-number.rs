use resilience::retry;

#[retry(jitter = "additive lots")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
