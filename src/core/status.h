// Status and Result<T>: how code at the user-input boundary (files, flags, configs) reports errors.
// An OK status holds no allocation; an error holds a message that names what was wrong and where.
// Kernels never return Status: once the boundary has checked shapes, they only assert invariants.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace weft {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok_status() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::make_shared<std::string>(std::move(message));
    return s;
  }
  bool ok() const { return message_ == nullptr; }
  const std::string& message() const {
    static const std::string kOk = "ok";
    return message_ ? *message_ : kOk;
  }
  // Prefixes context ("reading model.safetensors: ") onto an error; OK stays OK.
  Status with_context(const std::string& context) const {
    return ok() ? *this : error(context + ": " + *message_);
  }

 private:
  std::shared_ptr<std::string> message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace weft

// Early return of a failed Status from a function that returns Status or Result<T>.
#define WEFT_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::weft::Status weft_status_ = (expr);     \
    if (!weft_status_.ok()) return weft_status_; \
  } while (0)
