use resilience::retry;

#[tracing::instrument]
#[retry]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
