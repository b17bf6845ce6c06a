// #[distributed_lock(key = "order:{id}" , wait = "10s")]
// async fn pay (id : u64) -> Result < Receipt , AppError > { charge (id) . await ? ; Ok (Receipt :: new (id)) }

async fn pay(id: u64) -> Result<Receipt, AppError> {
    let __lock_acquired = ::distlock::__private::acquire(
            ::core::option::Option::None,
            ::std::format!("order:{}", id),
            ::distlock::__private::Kind::Plain,
            ::distlock::LockOptions::new()
                .wait(::distlock::Wait::For(::core::time::Duration::new(10u64, 0u32))),
        )
        .await;
    let __lock_guard = match __lock_acquired {
        ::core::result::Result::Ok(__lock_guard) => __lock_guard,
        ::core::result::Result::Err(__lock_error) => {
            #[allow(clippy::useless_conversion)]
            let __lock_error = ::core::result::Result::Err(
                ::core::convert::From::from(__lock_error),
            );
            return __lock_error;
        }
    };
    let __lock_body = async move {
        let __lock_return: Result<Receipt, AppError> = {
            charge(id).await?;
            Ok(Receipt::new(id))
        };
        #[allow(unreachable_code)] __lock_return
    };
    let __lock_output = ::distlock::LockGuard::scope(&__lock_guard, __lock_body).await;
    ::distlock::__private::release(::distlock::LockGuard::release(__lock_guard), "pay")
        .await;
    __lock_output
}
