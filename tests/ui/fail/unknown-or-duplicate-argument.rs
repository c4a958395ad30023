use resilience::retry;

#[retry(maxx = 3, max_attempts = 4, ratio = 0.5, max = 2, max = 3)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
