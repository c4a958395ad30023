use resilience::retry;

// More attempts than any dependency should take from one caller.
#[retry(max = 1000)]
async fn get_user(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

// A growth factor that jumps from `initial` to the cap at once.
#[retry(multiplier = 50.0)]
async fn get_order(id: u64) -> Result<u64, std::io::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
