use resilience::retry;

#[retry(initial = "100", max_interval = "2 s", max_elapsed = 5, attempt_timeout = "1sec")]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

#[retry(max = "3", preset = "htp", method = "GETT", when = "my_classifier")]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    Ok(id)
}

fn main() {}
