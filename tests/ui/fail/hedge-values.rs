use resilience::hedge;

#[hedge(delay = "0ms", max = 1)]
async fn get_user(id: u64) -> Result<u64, resilience::Error> {
    std::future::ready(Ok(id)).await
}

#[hedge(max = 11, dealy = "5ms")]
async fn get_order(id: u64) -> Result<u64, resilience::Error> {
    std::future::ready(Ok(id)).await
}

fn main() {}
