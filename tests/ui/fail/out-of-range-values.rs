use resilience::retry;

#[retry(initial = "3s", max_interval = "1s", multiplier = 0.5, jitter = 1.5)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(preset = "db_tx", multiplier = 3.0)]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(jitter = "decorrelated", multiplier = 3.0)]
async fn get_invoice(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
