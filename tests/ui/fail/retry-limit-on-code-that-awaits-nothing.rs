use resilience::retry;

#[retry(limit = "users")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    // A cache lookup: nothing here waits on a dependency.
    Ok(id * 2)
}

fn main() {}
