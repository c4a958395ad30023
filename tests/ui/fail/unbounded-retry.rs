use resilience::retry;

#[retry(max = 0)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(max = "infinite", max_elapsed = "0s")]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(forever)]
async fn get_item(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
