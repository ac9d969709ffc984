// common/base64: the RFC 4648 section 10 test vectors both ways, binary bytes, the whitespace
// kubeconfigs carry, and what the decoder refuses.
#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace korovod {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64Encode(plain), encoded) << plain;
    auto decoded = Base64Decode(encoded);
    ASSERT_TRUE(decoded.ok()) << encoded << ": " << decoded.status().ToString();
    EXPECT_EQ(*decoded, plain) << encoded;
  }
}

TEST(Base64, EveryByteValueRoundTrips) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (size_t len : {size_t{1}, size_t{2}, size_t{3}, size_t{255}, size_t{256}}) {
    const std::string in = bytes.substr(256 - len);
    const std::string encoded = Base64Encode(in);
    EXPECT_EQ(encoded.size(), (len + 2) / 3 * 4);
    EXPECT_EQ(Base64Decode(encoded).value(), in) << len;
  }
  EXPECT_EQ(Base64Encode("\xff\xfe\xfd"), "//79");  // the two non-alphanumeric digits
}

TEST(Base64, DecodeSkipsWhitespace) {
  EXPECT_EQ(Base64Decode("aGVs\nbG8h").value(), "hello!");
  EXPECT_EQ(Base64Decode(" aGVs\r\n\tbG8= \n").value(), "hello");
  EXPECT_EQ(Base64Decode("\n").value(), "");
}

TEST(Base64, DecodeRefusesBadInput) {
  for (const char* bad : {
           "abc",       // length
           "aGVsbG8",   // unpadded
           "aGV$bG8=",  // not in the alphabet
           "aGVs-G8=",  // base64url's digit
           "Zg=a",      // '=' before the end
           "Z===",      // too much padding
           "Zg==Zm8=",  // padding in the middle
           "====",
       }) {
    auto r = Base64Decode(bad);
    EXPECT_FALSE(r.ok()) << "\"" << bad << "\" decoded";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("not valid base64"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace korovod
