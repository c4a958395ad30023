use resilience::retry;

#[retry(limit = "users", priority = "critcal")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
