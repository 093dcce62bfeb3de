"""Small purpose-built mwpy programs that the tests run as real processes."""
